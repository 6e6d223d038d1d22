fn make_scaler(k: f32) -> fn(x)
fn apply_twice(f: fn(x), x: f32[2]) -> f32[2]
fn apply_twice(f: fn(v), x: f32[3]) -> f32[3]
fn main() -> ()
