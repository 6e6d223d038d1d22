fn outer(a: f32[M], b: f32[N]) -> f32[M, N]
fn flip(x: f32[A, B]) -> f32[B, A]
fn main() -> ()
