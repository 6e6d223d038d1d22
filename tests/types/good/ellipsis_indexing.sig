fn last_feature(x: f32[B, T, D]) -> f32[B, T]
fn first_batch(x: f32[B, T, D]) -> (f32[T, D], f32[T], f32[B, T, D], f32)
fn main() -> ()
