//! Test support for the encoder fixtures: reads them, and compares the gradients candle
//! computes through an encoder with golden gradients from an independent float64
//! implementation (`scripts/make-encoder-fixtures.py`, central finite differences of its
//! forward pass), so a wrong backward pass (candle's or `kernels_grad`'s) fails a test
//! instead of silently training the wrong model.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use candle_nn::VarMap;

/// A fixture's `config.json`.
pub(crate) fn read_config<T: serde::de::DeserializeOwned>(dir: &Path) -> T {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

/// A fixture's golden numbers: `golden.json` read as JSON.
pub(crate) fn read_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap()
}

/// The model's variables with the fixture's weights loaded into them.
pub(crate) fn load_weights(dir: &Path, vm: &mut VarMap) {
    vm.load(dir.join("model.safetensors")).unwrap();
}

/// Largest |a - b| over two rows of rows.
pub(crate) fn max_diff(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).flat_map(|(g, w)| g.iter().zip(w).map(|(a, b)| (a - b).abs())).fold(0f32, f32::max)
}

/// Backpropagates `loss` and checks every variable's gradient against the fixture's
/// `grads.safetensors`: same set of names, and each tensor within `2e-5 + 1e-4 * max
/// |golden|` (float32 arithmetic against float64 differences: about 1e-6 apart here).
pub(crate) fn assert_gradients_match(dir: &Path, vm: &VarMap, loss: &Tensor) {
    let grads = loss.backward().unwrap();
    let golden: HashMap<String, Tensor> =
        candle_core::safetensors::load(dir.join("grads.safetensors"), &Device::Cpu).unwrap();
    let vars = vm.data().lock().unwrap();
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    let mut golden_names: Vec<&String> = golden.keys().collect();
    golden_names.sort();
    assert_eq!(names, golden_names, "the model's variables are the fixture's weights");
    let mut bad = Vec::new();
    let mut checked_nonzero = 0;
    for name in names {
        let want = &golden[name];
        let got = match grads.get(vars[name].as_tensor()) {
            Some(g) => g.clone(),
            None => want.zeros_like().unwrap(),
        };
        let scale = want.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        if diff > 2e-5 + 1e-4 * scale {
            bad.push(format!("{name}: off by {diff} (largest golden entry {scale})"));
        }
        if scale > 1e-3 {
            checked_nonzero += 1;
        }
    }
    assert!(bad.is_empty(), "gradients differ from the independent implementation:\n{}", bad.join("\n"));
    assert!(checked_nonzero > vars.len() / 2, "the golden gradients are mostly zero: the check would be empty");
}
