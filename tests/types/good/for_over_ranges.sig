fn moving_average(x: f32[N], window: i64) -> f32[_]
fn main() -> ()
