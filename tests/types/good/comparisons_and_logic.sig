fn accuracy(pred: i64[B], labels: i64[B]) -> f32
fn in_range(x: f32[N], lo: f32, hi: f32) -> bool[N]
fn main() -> ()
