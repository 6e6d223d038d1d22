fn merge(pair: (f32[B, D], f32[B, E])) -> f32[B, D + E]
fn swap(pair: (f32[N], i64[M])) -> (i64[M], f32[N])
fn main() -> ()
