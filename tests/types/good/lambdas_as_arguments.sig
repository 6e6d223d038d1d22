fn mse(pred: f32[N], target: f32[N]) -> f32
fn mae(pred: f32[N], target: f32[N]) -> f32
fn evaluate(loss: fn(f32[N], f32[N]) -> f32, pred: f32[N], target: f32[N]) -> f32
fn main() -> ()
