fn scaled(x: f64, s: f64) -> f64
fn shifted(x: f64, s: f64) -> f64
fn main() -> ()
