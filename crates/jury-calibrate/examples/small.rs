use jury_calibrate::{Calibrated, LogOdds, Sample};
use rand::SeedableRng;
use rand::seq::index::sample;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let txt = std::fs::read_to_string(&a[1]).unwrap();
    let k_lab: usize = a[2].parse().unwrap();
    let trials: u64 = a[3].parse().unwrap();
    let mut lines = txt.lines();
    let h: Vec<usize> = lines.next().unwrap().split(' ').map(|v| v.parse().unwrap()).collect();
    let (n, k) = (h[0], h[1]);
    let (mut x, mut lf, mut y) = (vec![], vec![], vec![]);
    for l in lines {
        let v: Vec<f64> = l.split(' ').map(|v| v.parse().unwrap()).collect();
        x.extend_from_slice(&v[..k]);
        lf.push(1.0 / (1.0 + (-v[k]).exp()));
        y.push(v[k + 1] as u8);
    }
    let d = LogOdds::from_dense(n, k, x, &lf).unwrap();
    let mut accs = vec![];
    for t in 0..trials {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(t);
        let idx = sample(&mut rng, n, k_lab).into_vec();
        let lab: Vec<u8> = idx.iter().map(|&i| y[i]).collect();
        let pos = lab.iter().filter(|&&l| l == 1).count();
        if pos == 0 || pos == k_lab {
            continue;
        }
        let s = Sample::new(n, idx.clone(), lab, None).unwrap();
        let fit = Calibrated::fit(&d, &s, t);
        let p = fit.probabilities(&d);
        let mut is_lab = vec![false; n];
        idx.iter().for_each(|&i| is_lab[i] = true);
        let test: Vec<usize> = (0..n).filter(|&i| !is_lab[i]).collect();
        let acc = test.iter().filter(|&&i| (p[i] > 0.5) == (y[i] == 1)).count() as f64 / test.len() as f64;
        accs.push(acc);
    }
    accs.sort_by(|a, b| a.total_cmp(b));
    let m = accs.iter().sum::<f64>() / accs.len() as f64;
    println!("mean {m:.4} p10 {:.4} over {}", accs[accs.len() / 10], accs.len());
}
