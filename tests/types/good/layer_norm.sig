fn layer_norm(x: f32[B, 4], gain: f32[4], bias: f32[4]) -> f32[B, 4]
fn main() -> ()
