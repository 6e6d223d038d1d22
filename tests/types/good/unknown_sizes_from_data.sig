fn take(x: f32[N], n: i64) -> f32[_]
fn from_shape(x: f32[B, D]) -> f32[D, B]
fn data_sized(x: f32[N]) -> (f32[_, 2], i64[_], f32[_])
fn main() -> ()
