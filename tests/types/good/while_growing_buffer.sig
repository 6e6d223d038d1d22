fn doubled_until(limit: i64) -> f32[_]
fn rows(n: i64) -> f32[_, 2]
fn main() -> ()
