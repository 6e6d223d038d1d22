fn pooled(x: f32[B, T, D]) -> f32[B]
fn per_channel(x: f32[N, C, H, W]) -> (f32[C], f32[N, C, 1, 1], f32[N, W])
fn triangles(scores: f32[B, T, T]) -> f32[B, T, T]
fn main() -> ()
