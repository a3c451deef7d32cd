"""Looking inside a trained model: attention weights, the paper's Figures 3-5, a page, summaries.

weights.py extracts and merges the weights of one sentence (no TensorFlow
needed beyond the model's backend); figures.py draws them with matplotlib;
html_view.py writes the self-contained interactive page; summary.py turns
them into the TensorBoard image the trainer logs at each evaluation.
"""
