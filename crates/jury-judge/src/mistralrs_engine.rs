//! The `mistralrs` engine of in-process judges: a model loaded by mistral.rs 0.8.1 (GGUF
//! or safetensors, CPU or CUDA), asked for one step per judgment with a logits processor
//! that reads the full next-token distribution. Only with the `mistralrs` feature.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use either::Either;
use mistralrs::core::RequestMessage;
use mistralrs::{
    DType, Model, NormalRequest, Request, Response, SamplingParams, Tensor, TextMessageRole, TextMessages,
    TextModelBuilder,
};

use crate::config::{
    JudgeConfig, JudgeDevice, JudgePrecision, ModelSource, PREFIX_CACHE_ENTRIES, gguf_weights_label, resolve_model_id,
};

/// The device a judge with this setting runs on.
fn pick_device(wanted: JudgeDevice) -> anyhow::Result<mistralrs::Device> {
    Ok(match wanted {
        JudgeDevice::Cpu => mistralrs::Device::Cpu,
        JudgeDevice::Auto => mistralrs::best_device(!cfg!(feature = "cuda"))?,
    })
}

/// Whether a judge computes in f32 (always on a CPU) rather than the automatic dtype.
fn uses_f32(on_cpu: bool, precision: JudgePrecision) -> bool {
    on_cpu || precision == JudgePrecision::F32
}

/// How the engine fingerprint names where and in what a judge computes.
fn device_label(on_cpu: bool, precision: JudgePrecision) -> &'static str {
    match (on_cpu, uses_f32(on_cpu, precision)) {
        // crates/vendor's mistral.rs computes a CPU judge's attention with candle's
        // matmul and softmax, not mistral.rs's own CPU kernel (scores differ by about 1e-6).
        (true, _) => "cpu, f32 activations, attention by candle's matmul",
        (false, true) => "cuda, f32",
        (false, false) => "cuda, automatic dtype",
    }
}

/// Part of every cache key: the device and dtype actually used, since a GPU's automatic
/// dtype (bf16 where it can) gives other numbers than f32.
fn engine_fingerprint(source: &ModelSource, device: &mistralrs::Device, precision: JudgePrecision) -> String {
    let device = device_label(device.is_cpu(), precision);
    let weights = match source {
        ModelSource::Gguf(_) => gguf_weights_label(),
        ModelSource::Pretrained(_) => "safetensors",
    };
    format!("mistralrs 0.8.1 (candle 0.10.2); {device}; weights {weights}")
}

/// Loads a GGUF file with f32 activations and KV cache. `GgufModelBuilder` in mistral.rs
/// 0.8.1 always asks for the automatic dtype, which is bf16 on a CPU: attention then
/// converts every key and value element to f32 and back (measured: most of the time of a
/// judge on this machine). Weights stay as the GGUF has them unless
/// `CANDLE_DEQUANTIZE_ALL` is set (then dense f32).
async fn load_gguf(path: &std::path::Path, cfg: &JudgeConfig, device: &mistralrs::Device) -> anyhow::Result<Model> {
    use mistralrs::core::{
        AutoDeviceMapParams, DefaultSchedulerMethod, DeviceMapSetting, GGUFLoaderBuilder, GGUFSpecificConfig,
        MistralRsBuilder, ModelDType, SchedulerConfig, TokenSource,
    };
    let dir = path.parent().map(|d| d.to_string_lossy().into_owned()).unwrap_or_else(|| ".".into());
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let tokenizer = cfg.tokenizer.as_ref().map(|d| d.to_string_lossy().into_owned());
    let loader =
        GGUFLoaderBuilder::new(None, tokenizer, dir, vec![file], GGUFSpecificConfig { topology: None }, false, None)
            .build();
    let dtype = if uses_f32(device.is_cpu(), cfg.precision) { ModelDType::F32 } else { ModelDType::Auto };
    let pipeline = loader.load_model_from_hf(
        None,
        TokenSource::None,
        &dtype,
        device,
        true,
        DeviceMapSetting::Auto(AutoDeviceMapParams::default_text()),
        None,
        None,
    )?;
    let seqs = cfg.max_concurrency.max(1);
    let scheduler = SchedulerConfig::DefaultScheduler { method: DefaultSchedulerMethod::Fixed(seqs.try_into()?) };
    let runner = MistralRsBuilder::new(pipeline, scheduler, false, None)
        .with_no_prefix_cache(!cfg.prefix_cache)
        .with_prefix_cache_n(PREFIX_CACHE_ENTRIES)
        .build()
        .await;
    Ok(Model::new(runner))
}

pub(crate) struct MistralRsEngine {
    model: Model,
    next_id: AtomicUsize,
    fingerprint: String,
}

impl MistralRsEngine {
    /// Loads the judge's model (a local GGUF file, or a safetensors folder or hub id).
    pub(crate) async fn load(cfg: &JudgeConfig) -> anyhow::Result<Self> {
        let device = pick_device(cfg.device)?;
        let model = match &cfg.source {
            ModelSource::Gguf(path) => load_gguf(path, cfg, &device).await?,
            ModelSource::Pretrained(id) => {
                let local = resolve_model_id(id, &jury_hub::cache_root());
                let b = TextModelBuilder::new(local.to_string_lossy())
                    .with_prefix_cache_n(cfg.prefix_cache.then_some(PREFIX_CACHE_ENTRIES))
                    .with_max_num_seqs(cfg.max_concurrency.max(1));
                let b = if device.is_cpu() { b.with_force_cpu() } else { b };
                let b = if uses_f32(device.is_cpu(), cfg.precision) {
                    b.with_dtype(mistralrs::core::ModelDType::F32)
                } else {
                    b
                };
                b.build().await?
            }
        };
        let fingerprint = engine_fingerprint(&cfg.source, &device, cfg.precision);
        Ok(Self { model, next_id: AtomicUsize::new(0), fingerprint })
    }

    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Token ids of a piece of text, without special tokens.
    pub(crate) async fn tokenize_text(&self, text: &str) -> Result<Vec<u32>, String> {
        self.model.tokenize(Either::Right(text.to_owned()), None, false, false, None).await.map_err(|e| e.to_string())
    }

    /// The model's chat template over a system and a user turn, with the generation
    /// prompt, as token ids.
    pub(crate) async fn chat_tokens(&self, system: &str, user: String) -> Result<Vec<u32>, String> {
        let msgs =
            TextMessages::new().add_message(TextMessageRole::System, system).add_message(TextMessageRole::User, user);
        self.model.tokenize(Either::Left(msgs), None, true, true, None).await.map_err(|e| e.to_string())
    }

    /// The next-token logits after `tokens`: `Ok(Err(reason))` when the engine reports a
    /// model error for this sequence, `Err` when the engine cannot be reached.
    pub(crate) async fn last_logits(&self, tokens: Vec<u32>) -> Result<Result<Vec<f32>, String>, String> {
        let slot: Arc<Mutex<Option<Vec<f32>>>> = Arc::new(Mutex::new(None));
        let sink = slot.clone();
        let processor = move |logits: &Tensor, _context: &[u32]| -> mistralrs::Result<Tensor> {
            let v = logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            if let Ok(mut s) = sink.lock()
                && s.is_none()
            {
                *s = Some(v);
            }
            Ok(logits.clone())
        };
        if let Err(reason) = self.request(tokens, Arc::new(processor)).await? {
            return Ok(Err(reason));
        }
        Ok(slot.lock().ok().and_then(|mut s| s.take()).ok_or_else(|| "no logits were captured".to_owned()))
    }

    /// Sends one single-step request and waits for its end.
    async fn request(
        &self,
        tokens: Vec<u32>,
        processor: Arc<dyn mistralrs::CustomLogitsProcessor>,
    ) -> Result<Result<(), String>, String> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let mut params = SamplingParams::deterministic();
        params.max_len = Some(1);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut req = NormalRequest::new_simple(RequestMessage::CompletionTokens(tokens), params, tx, id, None, None);
        req.logits_processors = Some(vec![processor]);
        let sender = self.model.inner().get_sender(None).map_err(|e| e.to_string())?;
        sender.send(Request::Normal(Box::new(req))).await.map_err(|e| e.to_string())?;
        loop {
            match rx.recv().await {
                Some(Response::CompletionDone(_)) | Some(Response::Done(_)) => return Ok(Ok(())),
                Some(Response::CompletionModelError(e, _)) | Some(Response::ModelError(e, _)) => return Ok(Err(e)),
                Some(Response::InternalError(e)) | Some(Response::ValidationError(e)) => return Ok(Err(e.to_string())),
                Some(_) => continue,
                None => return Ok(Err("the engine closed the response channel".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_names_the_precision_a_gpu_judge_computes_in() {
        use JudgePrecision::{Auto, F32};
        // The CPU always computes in f32: its key is the same whatever the setting.
        assert_eq!(device_label(true, Auto), device_label(true, F32));
        let labels = [device_label(true, Auto), device_label(false, Auto), device_label(false, F32)];
        assert!(labels.iter().enumerate().all(|(i, a)| labels[i + 1..].iter().all(|b| a != b)), "{labels:?}");
    }
}
