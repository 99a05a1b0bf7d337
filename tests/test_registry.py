"""The registry finds models by name from TOML configs, imports them lazily, and explains bad configs."""

from __future__ import annotations

import json
import textwrap

import pytest

import mmtok
from mmtok import registry
from mmtok.errors import ConfigError
from mmtok.registry import add_config_dir, get_model, read_config

TOY_MODULE = '''
import json
from pathlib import Path

import torch

from mmtok.tokens import TokenSequence


class ByteTokenizer:
    """Bytes of UTF-8 text as ids: a real, tiny tokenizer for testing the registry mechanism."""

    kind = "tokenizer"
    modality = "text"

    def __init__(self, offset: int = 0):
        self.offset = offset
        self.name = "toy-bytes"

    def encode(self, text: str) -> TokenSequence:
        ids = torch.tensor(list(text.encode("utf-8")), dtype=torch.long) + self.offset
        return TokenSequence("text", ids=ids, tokenizer=self.name)

    def decode(self, seq: TokenSequence) -> str:
        return bytes((seq.ids - self.offset).tolist()).decode("utf-8")

    def save_pretrained(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        config = {"class": "toy_tokenizers:ByteTokenizer", "kind": "tokenizer", "offset": self.offset}
        (Path(folder) / "config.json").write_text(json.dumps(config))

    @classmethod
    def from_pretrained(cls, folder, **options):
        config = json.loads((Path(folder) / "config.json").read_text())
        return cls(offset=options.get("offset", config["offset"]))
'''


@pytest.fixture
def toy_registry(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "toy_tokenizers.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(code))
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "toy-bytes.toml").write_text(
        textwrap.dedent("""
        name = "toy-bytes"
        kind = "tokenizer"
        modality = "text"
        class = "toy_tokenizers:ByteTokenizer"
        description = "UTF-8 bytes"
        [options]
        offset = 3
    """)
    )
    monkeypatch.setenv("MMTOK_CONFIG_PATH", str(configs))
    monkeypatch.setattr(registry, "MODEL_CLASSES", dict(registry.MODEL_CLASSES))
    registry.register_class("toy_tokenizers:ByteTokenizer", "tokenizer")  # the user's own code allows its class
    return configs


def test_registered_tokenizer_is_listed_and_built_by_name(toy_registry):
    assert "toy-bytes" in mmtok.list_tokenizers()
    assert "toy-bytes" in mmtok.list_tokenizers(modality="text")
    assert "toy-bytes" not in mmtok.list_tokenizers(modality="image")
    tok = mmtok.get_tokenizer("toy-bytes")
    seq = tok.encode("héllo")
    assert seq.ids.tolist()[0] == ord("h") + 3
    assert tok.decode(seq) == "héllo"


def test_pretrained_folder_and_config_path_load_too(toy_registry, tmp_path):
    tok = mmtok.get_tokenizer("toy-bytes", offset=7)
    tok.save_pretrained(tmp_path / "saved")
    assert mmtok.get_tokenizer(tmp_path / "saved").offset == 7
    assert mmtok.get_tokenizer(toy_registry / "toy-bytes.toml").offset == 3


def test_unknown_name_lists_the_closest(toy_registry):
    with pytest.raises(ConfigError, match=r"unknown tokenizer 'toy-byte'; did you mean toy-bytes\b"):
        mmtok.get_tokenizer("toy-byte")


def test_add_config_dir_registers_for_this_process(tmp_path, toy_registry, monkeypatch):
    monkeypatch.delenv("MMTOK_CONFIG_PATH")
    monkeypatch.setattr("mmtok.registry._extra_dirs", [])
    assert "toy-bytes" not in mmtok.list_tokenizers()
    add_config_dir(toy_registry)
    assert "toy-bytes" in mmtok.list_tokenizers()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('name = "x"\nkind = "tokenizer"\n', "'class' is required"),
        ('name = "x"\nkind = "oracle"\nclass = "a:B"\n', "kind must be one of"),
        ('name = "x"\nkind = "tokenizer"\nclass = "nocolon"\n', "is not an mmtok model class"),
        ('name = "x"\nkind = "tokenizer"\nclass = "a:B"\ncolour = 3\n', r"unknown key\(s\) colour"),
        ('name = "x"\nkind = "backbone"\nclass = "mmtok.models.vq:VQTokenizer"\n', "is a tokenizer, not a backbone"),
        ("name = = 3", "invalid TOML"),
    ],
)
def test_bad_configs_name_the_file_and_field(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        read_config(path)
    assert str(path) in str(info.value)


def test_registered_class_naming_a_missing_module(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "MODEL_CLASSES", dict(registry.MODEL_CLASSES))
    registry.register_class("no_such_module_xyz:Thing", "tokenizer")
    path = tmp_path / "m.toml"
    path.write_text('name = "m"\nkind = "tokenizer"\nclass = "no_such_module_xyz:Thing"\n')
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        get_model(path)


def test_folder_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ConfigError, match="not a pretrained model folder"):
        mmtok.get_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"class": "mmtok.models.backbone:Backbone", "kind": "backbone"}))
    with pytest.raises(ConfigError, match="is a backbone, not a tokenizer"):
        mmtok.get_tokenizer(tmp_path)


def test_token_limits_come_from_each_tokenizers_config_without_building_it():
    from mmtok.models.text import ByteTokenizer, TiktokenTokenizer
    from mmtok.registry import BYTE_TOKENIZER_VOCAB, TIKTOKEN_VOCAB, token_limits

    vq, av = token_limits("vq-clip-tiny"), token_limits("av-tiny")
    assert (vq.modalities, vq.vocab, vq.levels, vq.embedding_dims) == (("image",), 1024, 1, (128,))
    assert (av.modalities, av.vocab, av.levels, av.embedding_dims) == (("audio", "video"), 1024, 8, (256,))
    assert token_limits("nobody") is None and token_limits("clip-tiny") is None  # a teacher, not a tokenizer
    for encoding, vocab in TIKTOKEN_VOCAB.items():  # the published n_vocab, as tiktoken gives it
        assert TiktokenTokenizer(encoding).vocab_size == vocab
    assert ByteTokenizer().vocab_size == BYTE_TOKENIZER_VOCAB == token_limits("text-bytes").vocab
    assert token_limits("text-o200k").vocab == TIKTOKEN_VOCAB["o200k_base"]
