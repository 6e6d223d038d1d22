fn images(x: f32[B, 64]) -> f32[B, 1, 8, 8]
fn pairs(x: f32[B, N, 6]) -> f32[B * N * 2, 3]
fn quarters(x: f32[B, 6]) -> f32[_, 4]
fn main() -> ()
