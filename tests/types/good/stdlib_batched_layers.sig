fn heads(x: f32[B, T, 8]) -> f32[B, 2, T, 4]
fn self_attention(x: f32[B, T, 8], w: f32[8, 8], causal: bool[T, T]) -> f32[B, 2, T, 4]
fn normed(x: f32[B, T, 8], gamma: f32[8], beta: f32[8]) -> f32[B, T, 8]
fn language_model_loss(logits: f32[B, T, V], targets: i64[B, T]) -> (f32, f32)
fn project(x: f32[3, 5, 8], w: f32[8, 11]) -> f32[3, 5, 11]
fn project(x: f32[7, 8], w: f32[8, 2]) -> f32[7, 2]
fn main() -> ()
