fn sgd(m: Linear, g: Linear, lr: f32) -> Linear
fn halves(t: (f32[N], f64)) -> ((f32[N], f64), (f32[N], f64))
fn main() -> ()
