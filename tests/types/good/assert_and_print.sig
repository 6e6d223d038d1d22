fn checked_mean(x: f32[N]) -> f32
fn main() -> ()
