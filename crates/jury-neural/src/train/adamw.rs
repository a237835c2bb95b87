//! AdamW as one parallel in-place pass per variable, for fine-tuning the encoder:
//! candle's `AdamW` computes the same update with a dozen single-threaded tensor ops per
//! variable, each allocating a tensor as large as the variable (MiniLM's word-embedding
//! table alone is 47 MB), about a tenth of a fine-tuning step's time on the CPU.
//!
//! Invariant: the update is candle's `AdamW::step` (same formula, same order of f32
//! operations, same bias correction); the test compares the two over several steps.
//! Variables on other devices (a GPU) or of other dtypes take candle's update as tensor
//! ops on their own device, with moments this optimiser holds, so every variable's state
//! saves. [`FusedAdamW::state`] and [`FusedAdamW::load_state`] carry the step count and
//! both moments through a checkpoint (on the CPU, whatever device wrote them), so a
//! resumed fine-tuning continues as if never stopped, on the same device or another.

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Device, InplaceOp2, Layout, Result, Tensor, Var, bail};
use candle_nn::ParamsAdamW;
use rayon::prelude::*;

/// Elements per parallel chunk.
const CHUNK: usize = 16_384;

/// A variable's first and second moments, as many values as the variable.
enum Moments {
    /// f32 on the CPU: updated in place by one parallel pass.
    Fused(Mutex<(Vec<f32>, Vec<f32>)>),
    /// Elsewhere: tensors on the variable's device, updated by candle's tensor ops.
    Tensors(Mutex<(Tensor, Tensor)>),
}

struct Slot {
    var: Var,
    moments: Moments,
}

fn poisoned() -> candle_core::Error {
    candle_core::Error::Msg("adamw: poisoned".into())
}

/// AdamW over float variables; f32 CPU variables take the fused pass.
pub(crate) struct FusedAdamW {
    slots: Vec<Slot>,
    params: ParamsAdamW,
    step_t: i32,
}

impl FusedAdamW {
    /// Non-float variables are left out, as candle's `AdamW` leaves them.
    pub(crate) fn new(vars: Vec<Var>, params: ParamsAdamW) -> Result<Self> {
        Self::build(vars, params, |v| v.dtype() == DType::F32 && v.device().is_cpu())
    }

    /// `fuse` says which variables take the fused CPU pass (tests force the tensor path
    /// on the CPU to check it against candle's optimiser).
    fn build(vars: Vec<Var>, params: ParamsAdamW, fuse: impl Fn(&Var) -> bool) -> Result<Self> {
        let slots = vars
            .into_iter()
            .filter(|v| v.dtype().is_float())
            .map(|var| {
                let moments = if fuse(&var) {
                    let n = var.elem_count();
                    Moments::Fused(Mutex::new((vec![0.0; n], vec![0.0; n])))
                } else {
                    let zeros = || Tensor::zeros(var.shape(), var.dtype(), var.device());
                    Moments::Tensors(Mutex::new((zeros()?, zeros()?)))
                };
                Ok(Slot { var, moments })
            })
            .collect::<Result<_>>()?;
        Ok(Self { slots, params, step_t: 0 })
    }

    /// The step count (`step`) and the moments of the i-th variable (`m{i}`, `v{i}`, i in
    /// the order given to [`FusedAdamW::new`]), flat, f32, on the CPU.
    pub(crate) fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        out.insert("step".to_string(), Tensor::new(&[self.step_t as u32], &Device::Cpu)?);
        for (i, slot) in self.slots.iter().enumerate() {
            let (m, v) = match &slot.moments {
                Moments::Fused(mv) => {
                    let guard = mv.lock().map_err(|_| poisoned())?;
                    (
                        Tensor::from_slice(&guard.0, guard.0.len(), &Device::Cpu)?,
                        Tensor::from_slice(&guard.1, guard.1.len(), &Device::Cpu)?,
                    )
                }
                Moments::Tensors(mv) => {
                    let guard = mv.lock().map_err(|_| poisoned())?;
                    let host = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_device(&Device::Cpu);
                    (host(&guard.0)?, host(&guard.1)?)
                }
            };
            out.insert(format!("m{i}"), m);
            out.insert(format!("v{i}"), v);
        }
        Ok(out)
    }

    /// Restores what [`FusedAdamW::state`] saved for the same variables in the same order
    /// (on any device).
    pub(crate) fn load_state(&mut self, state: &HashMap<String, Tensor>) -> Result<()> {
        if state.len() != 1 + 2 * self.slots.len() {
            bail!("adamw: the saved state holds {} tensors for {} variables", state.len(), self.slots.len())
        }
        let get = |name: &str| state.get(name).ok_or_else(|| candle_core::Error::Msg(format!("adamw: no `{name}`")));
        let step = get("step")?.to_vec1::<u32>()?;
        let &[step] = step.as_slice() else { bail!("adamw: `step` holds {} values", step.len()) };
        // Checked whole before anything changes: a bad file leaves the optimiser as it was.
        let mut moments = Vec::with_capacity(self.slots.len());
        for (i, slot) in self.slots.iter().enumerate() {
            let (m, v) = (get(&format!("m{i}"))?.to_vec1::<f32>()?, get(&format!("v{i}"))?.to_vec1::<f32>()?);
            let n = slot.var.elem_count();
            if m.len() != n || v.len() != n {
                bail!("adamw: variable {i} has {n} values, its saved moments {} and {}", m.len(), v.len())
            }
            moments.push((m, v));
        }
        let step = i32::try_from(step).map_err(|_| candle_core::Error::Msg(format!("adamw: step {step}")))?;
        for (slot, (m, v)) in self.slots.iter().zip(moments) {
            match &slot.moments {
                Moments::Fused(mv) => *mv.lock().map_err(|_| poisoned())? = (m, v),
                Moments::Tensors(mv) => {
                    let var = &slot.var;
                    let put = |x: Vec<f32>| Tensor::from_vec(x, var.shape(), var.device())?.to_dtype(var.dtype());
                    *mv.lock().map_err(|_| poisoned())? = (put(m)?, put(v)?);
                }
            }
        }
        self.step_t = step;
        Ok(())
    }

    /// The learning rate of the next steps (a schedule moves it).
    pub(crate) fn set_lr(&mut self, lr: f64) {
        self.params.lr = lr;
    }

    pub(crate) fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step_t += 1;
        let p = &self.params;
        let update = Update {
            lr: p.lr,
            beta1: p.beta1,
            beta2: p.beta2,
            eps: p.eps,
            decay: 1.0 - p.lr * p.weight_decay,
            scale_m: 1.0 / (1.0 - p.beta1.powi(self.step_t)),
            scale_v: 1.0 / (1.0 - p.beta2.powi(self.step_t)),
        };
        for slot in &self.slots {
            let Some(g) = grads.get(&slot.var) else { continue };
            match &slot.moments {
                Moments::Fused(mv) => {
                    let g = g.contiguous()?;
                    slot.var.as_tensor().inplace_op2(&g, &Apply { update: &update, moments: mv })?;
                }
                Moments::Tensors(mv) => {
                    let mut guard = mv.lock().map_err(|_| poisoned())?;
                    let (m, v) = &mut *guard;
                    // A weight's gradient is computed from the forward's activations and
                    // carries their graph: moments built from it would keep every step's
                    // activations alive through the chain m -> previous m.
                    update.tensors(&slot.var, &g.detach(), m, v)?;
                }
            }
        }
        Ok(())
    }
}

/// One step's constants.
struct Update {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    decay: f64,
    scale_m: f64,
    scale_v: f64,
}

impl Update {
    /// candle's `AdamW::step` for one variable, op for op, on the variable's device.
    fn tensors(&self, var: &Var, g: &Tensor, m: &mut Tensor, v: &mut Tensor) -> Result<()> {
        let next_m = ((&*m * self.beta1)? + (g * (1.0 - self.beta1))?)?;
        let next_v = ((&*v * self.beta2)? + (g.sqr()? * (1.0 - self.beta2))?)?;
        let adjusted = ((&next_m * self.scale_m)? / ((&next_v * self.scale_v)?.sqrt()? + self.eps)?)?;
        let next = ((var.as_tensor() * self.decay)? - (adjusted * self.lr)?)?;
        var.set(&next)?;
        (*m, *v) = (next_m, next_v);
        Ok(())
    }
}

struct Apply<'a> {
    update: &'a Update,
    moments: &'a Mutex<(Vec<f32>, Vec<f32>)>,
}

impl InplaceOp2 for Apply<'_> {
    fn name(&self) -> &'static str {
        "fused-adamw"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let (CpuStorage::F32(theta), CpuStorage::F32(grad)) = (s1, s2) else { bail!("fused-adamw: f32 only") };
        let (Some((t0, t1)), Some((g0, g1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            bail!("fused-adamw: contiguous tensors only")
        };
        let (theta, grad) = (&mut theta[t0..t1], &grad[g0..g1]);
        let mut guard = self.moments.lock().map_err(|_| candle_core::Error::Msg("fused-adamw: poisoned".into()))?;
        let (m, v) = &mut *guard;
        if theta.len() != grad.len() || theta.len() != m.len() {
            bail!("fused-adamw: {} values, {} gradients, {} moments", theta.len(), grad.len(), m.len());
        }
        // candle's affine(x, mul, add) is x * (mul as f32) + (add as f32); the same
        // constants and operation order here keep the result equal to candle's.
        let u = self.update;
        let (b1, c1) = (u.beta1 as f32, (1.0 - u.beta1) as f32);
        let (b2, c2) = (u.beta2 as f32, (1.0 - u.beta2) as f32);
        let (sm, sv, eps, lr, decay) = (u.scale_m as f32, u.scale_v as f32, u.eps as f32, u.lr as f32, u.decay as f32);
        theta
            .par_chunks_mut(CHUNK)
            .zip(grad.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((t, g), m), v)| {
                for i in 0..t.len() {
                    let gi = g[i];
                    let mi = (m[i] * b1 + 0.0) + (gi * c1 + 0.0);
                    let vi = (v[i] * b2 + 0.0) + ((gi * gi) * c2 + 0.0);
                    m[i] = mi;
                    v[i] = vi;
                    let adjusted = (mi * sm + 0.0) / ((vi * sv + 0.0).sqrt() + eps);
                    t[i] = (t[i] * decay + 0.0) - (adjusted * lr + 0.0);
                }
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use candle_nn::{AdamW, Optimizer};

    /// Same variables, same gradients: the fused optimiser and candle's end equal.
    #[test]
    fn matches_candles_adamw_over_several_steps() {
        let dev = Device::Cpu;
        let init = Tensor::randn(0f32, 1.0, (3, 50_000), &dev).unwrap();
        let small = Tensor::randn(0f32, 1.0, 7, &dev).unwrap();
        let params = ParamsAdamW { lr: 1e-2, weight_decay: 0.01, ..Default::default() };
        let (a, a2) = (Var::from_tensor(&init).unwrap(), Var::from_tensor(&small).unwrap());
        let (b, b2) = (Var::from_tensor(&init).unwrap(), Var::from_tensor(&small).unwrap());
        let mut fused = FusedAdamW::new(vec![a.clone(), a2.clone()], params.clone()).unwrap();
        let mut reference = AdamW::new(vec![b.clone(), b2.clone()], params).unwrap();
        let target = Tensor::randn(0f32, 1.0, (3, 50_000), &dev).unwrap();
        for step in 0..4 {
            let loss = |x: &Var, y: &Var| {
                let l = (x.as_tensor() - &target).unwrap().sqr().unwrap().sum_all().unwrap();
                // The small variable gets a gradient every other step only.
                if step % 2 == 0 { (l + y.as_tensor().sqr().unwrap().sum_all().unwrap()).unwrap() } else { l }
            };
            fused.step(&loss(&a, &a2).backward().unwrap()).unwrap();
            reference.step(&loss(&b, &b2).backward().unwrap()).unwrap();
        }
        for (x, y) in [(&a, &b), (&a2, &b2)] {
            let d =
                (x.as_tensor() - y.as_tensor()).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-6, "fused and candle's AdamW differ by {d}");
        }
        // Saved after four steps and loaded into a fresh optimiser over copies of the
        // variables, the next step matches the original's.
        let (c, c2) = (Var::from_tensor(a.as_tensor()).unwrap(), Var::from_tensor(a2.as_tensor()).unwrap());
        let mut restored = FusedAdamW::new(
            vec![c.clone(), c2.clone()],
            ParamsAdamW { lr: 1e-2, weight_decay: 0.01, ..Default::default() },
        )
        .unwrap();
        restored.load_state(&fused.state().unwrap()).unwrap();
        let step = |x: &Var, y: &Var| {
            let l = (x.as_tensor() - &target).unwrap().sqr().unwrap().sum_all().unwrap();
            (l + y.as_tensor().sqr().unwrap().sum_all().unwrap()).unwrap().backward().unwrap()
        };
        fused.step(&step(&a, &a2)).unwrap();
        restored.step(&step(&c, &c2)).unwrap();
        for (x, y) in [(&a, &c), (&a2, &c2)] {
            assert_eq!(
                x.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                y.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()
            );
        }
        // A state is refused by an optimiser over other variables.
        let d = Var::from_tensor(&init).unwrap();
        let mut fresh = FusedAdamW::new(vec![d.clone()], ParamsAdamW { lr: 1e-2, ..Default::default() }).unwrap();
        let wrong = fresh.load_state(&restored.state().unwrap());
        assert!(wrong.is_err(), "a state for two variables loads into one");
        let moved = (a.as_tensor() - &init).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(moved > 1e-3, "the variables did not move");
    }

    /// The path GPU variables take, forced on the CPU: candle's update op for op, and its
    /// state loads into the fused path (a checkpoint written on a GPU resumes on a CPU).
    #[test]
    fn the_tensor_path_is_candles_adamw_and_its_state_moves_to_the_fused_path() {
        let dev = Device::Cpu;
        let init = Tensor::randn(0f32, 1.0, (4, 300), &dev).unwrap();
        let target = Tensor::randn(0f32, 1.0, (4, 300), &dev).unwrap();
        let params = ParamsAdamW { lr: 1e-2, weight_decay: 0.01, ..Default::default() };
        let grad = |x: &Var| (x.as_tensor() - &target).unwrap().sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let values = |x: &Var| x.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (a, b) = (Var::from_tensor(&init).unwrap(), Var::from_tensor(&init).unwrap());
        let mut tensors = FusedAdamW::build(vec![a.clone()], params.clone(), |_| false).unwrap();
        assert!(matches!(tensors.slots[0].moments, Moments::Tensors(_)));
        let mut reference = AdamW::new(vec![b.clone()], params.clone()).unwrap();
        for _ in 0..3 {
            tensors.step(&grad(&a)).unwrap();
            reference.step(&grad(&b)).unwrap();
        }
        assert_eq!(values(&a), values(&b), "the tensor path is not candle's update");
        let c = Var::from_tensor(a.as_tensor()).unwrap();
        let mut fused = FusedAdamW::new(vec![c.clone()], params).unwrap();
        assert!(matches!(fused.slots[0].moments, Moments::Fused(_)));
        fused.load_state(&tensors.state().unwrap()).unwrap();
        tensors.step(&grad(&a)).unwrap();
        fused.step(&grad(&c)).unwrap();
        let d = values(&a).iter().zip(values(&c)).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(d < 1e-6, "the resumed fused step differs by {d}");
        let moved = values(&a)
            .iter()
            .zip(init.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .any(|(x, y)| (x - y).abs() > 1e-3);
        assert!(moved, "the variables did not move");
    }

    /// A weight's gradient is computed from the forward's activations, so it carries
    /// their graph; the tensor path (every GPU variable) keeps no graph in its moments,
    /// or each step's activations would stay alive through them (a leak found on an
    /// H200 at about 20 GB a second).
    #[test]
    fn the_tensor_path_keeps_no_graph_in_its_moments() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 4), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 2), &dev).unwrap()).unwrap();
        let target = Tensor::randn(0f32, 1.0, (3, 2), &dev).unwrap();
        let params = ParamsAdamW { lr: 1e-2, ..Default::default() };
        let mut opt = FusedAdamW::build(vec![x.clone(), w.clone()], params, |_| false).unwrap();
        for _ in 0..3 {
            let h = x.as_tensor().tanh().unwrap();
            let loss = (h.matmul(w.as_tensor()).unwrap() - &target).unwrap().sqr().unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            opt.step(&grads).unwrap();
        }
        for slot in &opt.slots {
            let Moments::Tensors(mv) = &slot.moments else { panic!("the tensor path was not taken") };
            let (m, v) = &*mv.lock().unwrap();
            assert!(!m.track_op() && !v.track_op(), "the moments hold the gradients' graphs");
        }
    }
}
