fn accumulate(x: f64[N]) -> f64
fn product(x: f64, n: i64) -> f64
fn scaled(x: f64[N]) -> f64[N]
fn counter(x: f32[N]) -> i64
fn main() -> ()
