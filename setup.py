from setuptools import find_packages, setup

setup(
    name="rfa-doc-mt",
    version="0.1.0",
    description="Document-level machine translation with efficient attention (fairseq plugin)",
    packages=find_packages(include=["rfa_doc_mt", "rfa_doc_mt.*"]),
    python_requires=">=3.11",
    # torch and fairseq-fixed are installed by `make setup` (see requirements.txt for why);
    # listing them here would let pip pull a CUDA torch on a CPU machine.
    install_requires=[
        "numpy>=1.24",
        "hydra-core==1.3.2",
        "omegaconf==2.3.0",
        "bitarray",
        "regex",
        "sacrebleu>=2.3",
        "sentencepiece>=0.1.99",
        "sacremoses>=0.1",
        "jieba>=0.42",
        "matplotlib>=3.7",
        "tqdm",
    ],
)
