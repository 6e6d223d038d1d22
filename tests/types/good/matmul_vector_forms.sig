fn forms(w: f32[M, K], x: f32[K], y: f32[M], batch: f32[B, T, M]) -> (f32[M], f32[K], f32, f32[B, T, K])
fn main() -> ()
