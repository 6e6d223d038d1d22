fn to_f64(x: f32[N]) -> f64[N]
fn main() -> ()
