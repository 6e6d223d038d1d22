fn attention_weights(q: f32[B, T, D], k: f32[B, T, D]) -> f32[B, T, T]
fn apply(w: f32[B, T, T], v: f32[B, T, D]) -> f32[B, T, D]
fn main() -> ()
