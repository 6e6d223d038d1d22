fn loss_and_grad(w: f32[N], x: f32[N], y: f32) -> (f32, f32[N])
fn main() -> ()
