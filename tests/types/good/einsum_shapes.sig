fn scores(q: f32[B, H, T, D], k: f32[B, H, S, D]) -> f32[B, H, T, S]
fn bilinear(x: f64[N, I], w: f64[I, J], y: f64[N, J]) -> f64[N]
fn main() -> ()
