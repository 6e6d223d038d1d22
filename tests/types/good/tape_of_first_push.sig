fn last_scaled(x: f32[N, 3]) -> f32[3]
fn main() -> ()
