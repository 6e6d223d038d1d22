fn adam_init(w: f32[N]) -> Adam[N]
fn adam_update(s: Adam, w: f32[N], g: f32[N], lr: f32) -> (f32[N], Adam[N])
fn main() -> ()
