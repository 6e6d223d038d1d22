fn grid(n: i64) -> f32[_]
fn steps(lo: f64, hi: f64) -> f64[_]
fn main() -> ()
