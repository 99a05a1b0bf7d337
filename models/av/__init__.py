"""Shared audio/video time-frequency embedder: time-aligned audio and video tokens in one space.

Audio: waveform -> 16 kHz mono -> torchaudio log-mel (80 bins); ``frames_per_token`` consecutive mel frames make
one token, so the mel hop is chosen from the token rate (16 tokens/s: 4 frames of 15.6 ms). Video: frames sampled
at the token rate (PyAV, streamed), 32 x 32 grey frame differences (1,024-d motion, as the design seed's optical
flow features) plus a 4 x 4 RGB appearance grid. Each modality has a linear projection into one ``d_model`` space;
a shared codebook (vector-quantize-pytorch) turns both into discrete ids. Tokens get a modality embedding and a
learned position embedding indexed by time (token i sits at t = i / rate), so audio and video tokens of the same
instant share a position. Sequences longer than the position table (256 = 16 s at 16 Hz) are chunked: positions
restart every 256 tokens while ``times`` stay absolute; nothing is truncated.

Audio decodes back to a waveform (features -> log-mel -> torchaudio InverseMelScale + GriffinLim), so the WER of
speech after tokenisation can be measured at each token rate, with and without the codebook.

Shapes: N tokens, A = 80 x frames_per_token audio feature size, V = 32^2 + 3 x 4^2 video feature size, d model size.

The parts: :mod:`.config` (the config and its limits), :mod:`.audio` (log-mel token features), :mod:`.video`
(sampled frames into motion and appearance features), :mod:`.codes` (the residual codebook's nearest codes) and
:mod:`.tokenizer` (:class:`AVTokenizer`: projections, codebook, positions, decoding).
"""

from mmtok.models.av.audio import AudioFeatures, MelSpec, _mel_tables
from mmtok.models.av.codes import _library_choice, residual_nearest_codes
from mmtok.models.av.config import (
    AV_LIMITS,
    CLASS_PATH,
    DISTANCE_FLOOR,
    LOG_FLOOR,
    MAX_MEDIA_SECONDS,
    MIN_HOP,
    MIN_TOKENS_PER_SECOND,
    MODALITY_INDEX,
    SEARCH_ROWS,
    AVConfig,
)
from mmtok.models.av.tokenizer import AVTokenizer
from mmtok.models.av.video import between_samples, sampled_small_frames, video_features_from_frames

__all__ = [
    "AV_LIMITS",
    "CLASS_PATH",
    "DISTANCE_FLOOR",
    "LOG_FLOOR",
    "MAX_MEDIA_SECONDS",
    "MIN_HOP",
    "MIN_TOKENS_PER_SECOND",
    "MODALITY_INDEX",
    "SEARCH_ROWS",
    "AVConfig",
    "AVTokenizer",
    "AudioFeatures",
    "MelSpec",
    "_library_choice",  # the tests compare it with vector-quantize-pytorch's choice
    "_mel_tables",  # and this with torchaudio's mel scale
    "between_samples",
    "residual_nearest_codes",
    "sampled_small_frames",
    "video_features_from_frames",
]
