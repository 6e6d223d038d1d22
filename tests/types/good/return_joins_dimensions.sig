fn head(x: f32[N], k: i64) -> f32[_]
fn halve(x: f32[_]) -> f32[_]
fn halve(x: f32[8]) -> f32[_]
fn main() -> ()
