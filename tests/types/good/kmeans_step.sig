fn assign(x: f32[N, D], centers: f32[K, D]) -> i64[N]
fn update(x: f32[N, D], labels: i64[N], k: i64) -> f32[_, D]
fn main() -> ()
