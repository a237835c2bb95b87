//! Judge outputs as both recipes' trainers read them ([`JuryData`]) and the tensors they
//! train on ([`tensors`]): one home for the data the jury-v1 and the `paper` recipes share.

use candle_core::Tensor;

use crate::NeuralError;
use crate::config::ModelKind;

/// Judge outputs as the trainer reads them: `y[n*k + j]` = judge j's P(positive) on
/// example n, `present` marks the available ones.
pub struct JuryData<'a> {
    pub n: usize,
    pub k: usize,
    pub y: &'a [f32],
    pub present: &'a [bool],
}

/// Tensors for training: contexts [n, h], targets [n, k] (Train-on-MV: [n, 1] majority
/// vote) and mask [n, k].
pub fn tensors(x: &Tensor, jury: &JuryData, method: ModelKind) -> Result<(Tensor, Tensor, Tensor), NeuralError> {
    let dev = x.device();
    let mask: Vec<f32> = jury.present.iter().map(|&p| if p { 1.0 } else { 0.0 }).collect();
    let y: Vec<f32> = jury.y.iter().zip(jury.present).map(|(&y, &p)| if p { y } else { 0.0 }).collect();
    let mask_t = Tensor::from_vec(mask, (jury.n, jury.k), dev)?;
    let y_t = Tensor::from_vec(y.clone(), (jury.n, jury.k), dev)?;
    if method != ModelKind::TrainOnMv {
        return Ok((x.clone(), y_t, mask_t));
    }
    // Majority vote of hard votes, ties to the positive class.
    let mv: Vec<f32> = (0..jury.n)
        .map(|i| {
            let (mut pos, mut all) = (0usize, 0usize);
            for j in 0..jury.k {
                if jury.present[i * jury.k + j] {
                    all += 1;
                    pos += usize::from(y[i * jury.k + j] > 0.5);
                }
            }
            if 2 * pos >= all { 1.0 } else { 0.0 }
        })
        .collect();
    Ok((x.clone(), Tensor::from_vec(mv, (jury.n, 1), dev)?, mask_t))
}

#[cfg(test)]
pub(crate) mod tests {
    use candle_core::{Device, Tensor};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A jury with known skills on a context that predicts the label: x = (2c - 1 + noise,
    /// noise...). Judges vote hard with P(b=0|c=0) = p0, P(b=1|c=1) = p1; 10% missing.
    pub(crate) fn jury(n: usize, skills: &[(f64, f64)], seed: u64) -> (Tensor, Vec<f32>, Vec<bool>, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let h = 6;
        let (mut x, mut y, mut present, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let c = usize::from(rng.random::<f64>() < 0.5);
            labels.push(c);
            x.push((2.0 * c as f64 - 1.0 + rng.random::<f64>() - 0.5) as f32);
            x.extend((1..h).map(|_| (rng.random::<f64>() - 0.5) as f32));
            for &(p0, p1) in skills {
                let correct = rng.random::<f64>() < if c == 1 { p1 } else { p0 };
                let vote = if correct { c } else { 1 - c };
                y.push(vote as f32);
                present.push(rng.random::<f64>() >= 0.1);
            }
        }
        (Tensor::from_vec(x, (n, h), &Device::Cpu).unwrap(), y, present, labels)
    }
}
