fn predict(m: Model, x: f32[B, 2]) -> f32[B, 1]
fn loss(m: Model, x: f32[B, 2], y: f32[B, 1]) -> f32
fn step(m: Model, x: f32[B, 2], y: f32[B, 1], lr: f32) -> Model
fn main() -> ()
