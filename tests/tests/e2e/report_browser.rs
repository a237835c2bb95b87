//! The report in a real browser: `screenshot-report` (scripts/screenshot-report) opens `report.html` in
//! headless Chromium, on a new profile each time, and watches the page's own target over
//! the DevTools protocol; the page renders, writes nothing to the console and asks for
//! nothing beyond its own file. The browser's background traffic is not the page's and
//! cannot fail it. Debian's `chromium` is installed on first use
//! (`scripts/install-chromium.sh`, as root); where it cannot be, the test fails saying so.

use std::fs;
use std::path::Path;
use std::process::Output;

use crate::common::jury;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn screenshot(dir: &Path, png: &Path) -> Output {
    crate::common::install("scripts/install-chromium.sh", "Debian's chromium");
    std::process::Command::new(env!("CARGO_BIN_EXE_screenshot-report"))
        .args([path_str(dir), path_str(png)])
        .output()
        .expect("starting screenshot-report")
}

/// Width, height and the share of pixels that differ from the top-left one (the page's
/// background) of an 8-bit PNG.
fn ink(png: &Path) -> (u32, u32, f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let background = pixels[0];
    let inked = pixels.iter().filter(|p| **p != background).count();
    (info.width, info.height, inked as f64 / pixels.len() as f64)
}

/// A HaluEval-shaped simulated run's report (tables, bar chart, heatmap, reliability
/// diagrams, hardest examples with `<script>` in their texts) renders with no console
/// line and no request.
#[test]
fn a_real_report_renders_in_headless_chromium_offline_and_silent() {
    let dir = tempfile::tempdir().unwrap();
    let sim = crate::common::simulated_jury_with_texts(dir.path(), "<script>console.error('ran')</script>");
    let out = dir.path().join("out");
    let (judgments, labels) = (sim.join("judgments.csv"), sim.join("labels.csv"));
    let args = ["--judgments", path_str(&judgments), "--labels", path_str(&labels)];
    let run = jury(&[&["aggregate"], &args[..], &["--out", path_str(&out)]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let contexts = dir.path().join("contexts.csv");
    let again = jury(&[&["report", path_str(&out)], &args[..], &["--contexts", path_str(&contexts)]].concat());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(fs::read_to_string(out.join("report.html")).unwrap().contains("<section id=\"hardest\""));

    let png = dir.path().join("report.png");
    let shot = screenshot(&out, &png);
    assert!(shot.status.success(), "scripts/screenshot-report: {}", String::from_utf8_lossy(&shot.stderr));
    let (width, height, inked) = ink(&png);
    assert_eq!((width, height), (1200, 3000));
    assert!(inked > 0.05, "the page looks blank: {:.3} of its pixels drawn", inked);
}

/// Runs the check on a one-line page and returns its stderr, asserting it failed (status
/// 1) and wrote no picture.
fn rejected(page: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("report.html"), format!("<!doctype html><p>text</p>{page}")).unwrap();
    let png = dir.path().join("report.png");
    let shot = screenshot(dir.path(), &png);
    let stderr = String::from_utf8_lossy(&shot.stderr).into_owned();
    assert_eq!(shot.status.code(), Some(1), "{page}: {stderr}");
    assert!(!png.exists(), "{page}: a rejected page still wrote {}", png.display());
    stderr
}

/// A page that loads a script from the network fails, naming the address.
#[test]
fn a_report_that_loads_a_remote_script_fails() {
    let stderr = rejected("<script src=\"https://example.com/x.js\"></script>");
    assert!(stderr.contains("request: https://example.com/x.js"), "{stderr}");
}

/// A page that writes to the console fails, naming what it wrote; so does one that
/// writes after the load event, or that asks for another local file.
#[test]
fn a_report_that_writes_to_the_console_fails() {
    let stderr = rejected("<script>console.error('boom')</script>");
    assert!(stderr.contains("console.error: boom"), "{stderr}");
    let stderr = rejected("<script>setTimeout(() => console.log('late'), 50)</script>");
    assert!(stderr.contains("console.log: late"), "{stderr}");
    let stderr = rejected("<img src=\"plot.png\">");
    assert!(stderr.contains("request: file://") && stderr.contains("/plot.png"), "{stderr}");
}
