fn scale(x: f64[N]) -> f64[N]
fn shift(x: f64[N]) -> f64[N]
fn halve(k: i32[N]) -> i32[N]
fn main() -> ()
