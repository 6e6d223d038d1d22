fn forward(m: Linear, x: f32[B, 3]) -> f32[B, 2]
fn scaled(m: Linear, k: f32) -> Linear
fn main() -> ()
