fn sgd_epoch(w: f32[D], xs: f32[N, D], ys: f32[N]) -> f32[D]
fn main() -> ()
