fn leaky_relu(x: f32[N], slope: f32) -> f32[N]
fn masked_softmax(scores: f32[T], mask: bool[T]) -> f32[T]
fn main() -> ()
