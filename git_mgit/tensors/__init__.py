"""What a model file holds, element by element: read without loading the model.

- safetensors_format: the header, streamed (never the tensor data)
- dtypes: every element type a header may name, with its bit layout
- numerics: elements as float64 and back, correctly rounded
- stats: summary statistics of a tensor, streamed (what `git diff` shows)
- planebounds: what the top k byte planes of a float say about its value
- multires: a model version's float tensors from their top k byte planes
"""
