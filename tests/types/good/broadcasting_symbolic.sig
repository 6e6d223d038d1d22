fn pairwise_diff(a: f32[B, 1], b: f32[1, N]) -> f32[B, N]
fn pairwise_distances(x: f32[N, D], c: f32[K, D]) -> f32[N, K]
fn main() -> ()
