fn like(x: f32[N]) -> f32[N]
fn outer_shape(a: f32[M], b: f32[N]) -> f32[M, N]
fn main() -> ()
