fn power(x: f32, n: i64) -> f32
fn depth(n: i64) -> i64
fn tree_sum(x: f32[N]) -> f32
fn main() -> ()
