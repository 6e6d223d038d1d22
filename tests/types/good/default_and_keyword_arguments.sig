fn sgd(w: f32[N], g: f32[N], lr: f32, decay: f32) -> f32[N]
fn main() -> ()
