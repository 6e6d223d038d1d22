fn dense(x: f32[B, I], w: f32[I, O], b: f32[O]) -> f32[B, O]
fn mlp(x: f32[B, 64], w1: f32[64, 16], w2: f32[16, 10]) -> f32[B, 10]
fn main() -> ()
