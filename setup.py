"""t2tlite: the Transformer of "Attention Is All You Need" on TensorFlow 2 / Keras 3.

The top-level folders problems/, hparams/ and bin/ install as t2tlite.problems,
t2tlite.hparams and t2tlite.bin, so nothing squats a generic top-level name.
"""

from setuptools import setup

setup(
    name="t2tlite",
    version="0.1.0",
    description="Paper-faithful Transformer (Vaswani et al. 2017) in the style of tensor2tensor",
    python_requires=">=3.10",
    packages=[
        "t2tlite", "t2tlite.layers", "t2tlite.models", "t2tlite.training",
        "t2tlite.decoding", "t2tlite.data", "t2tlite.metrics", "t2tlite.visualization",
        "t2tlite.problems", "t2tlite.hparams", "t2tlite.bin",
    ],
    package_dir={
        "t2tlite": "t2tlite",
        "t2tlite.problems": "problems",
        "t2tlite.hparams": "hparams",
        "t2tlite.bin": "bin",
    },
    install_requires=[
        "tensorflow==2.21.*",
        "keras>=3.15,<3.16",
        "tensorflow-text==2.21.*",
        "tensorflow-datasets>=4.9,<4.10",
        "sacrebleu>=2.4",
        "sentencepiece>=0.2",  # Learns the subword vocabularies; encodes in bulk for datagen.
        "sacremoses>=0.1",  # tokenizer.perl port, for the paper's tokenized BLEU (t2t-bleu).
        "absl-py>=2.1",
        "tensorboard",  # TF 2.21 no longer depends on it; summaries and the UI need it.
        "numpy",
        "matplotlib>=3.7",  # t2t-plot-curves (the README's recipes) and t2t-attention's figures.
        "filelock>=3.12",  # One trainer per run directory: an OS lock that dies with its owner.
    ],
    # "plots" stays (now empty) so `pip install -e .[plots]` from older instructions still works.
    # "jax": the keras.ops model core on the JAX backend (CPU wheels; tests/test_backends.py).
    extras_require={"test": ["pytest>=8", "pytest-xdist>=3.5", "jax[cpu]"], "jax": ["jax[cpu]"], "plots": []},
    entry_points={
        "console_scripts": [
            "t2t-trainer=t2tlite.bin.t2t_trainer:run",
            "t2t-decoder=t2tlite.bin.t2t_decoder:run",
            "t2t-datagen=t2tlite.bin.t2t_datagen:run",
            "t2t-avg-all=t2tlite.bin.t2t_avg_all:run",
            "t2t-bleu=t2tlite.bin.t2t_bleu:run",
            "t2t-plot-curves=t2tlite.bin.t2t_plot_curves:run",
            "t2t-parse-eval=t2tlite.bin.t2t_parse_eval:run",
            "t2t-attention=t2tlite.bin.t2t_attention:run",
        ],
    },
)
