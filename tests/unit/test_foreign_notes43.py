"""SB3's and CleanRL's names get one explanation each (config.FOREIGN_NOTE_TEMPLATES), written in field
words for a config file or a script and in flag words on the command line: the two tables were kept
by hand and had to be edited twice for every change."""

from __future__ import annotations

import pytest

from proxima import cli
from proxima.config import FOREIGN_NOTE_TEMPLATES, FOREIGN_NOTES, did_you_mean, foreign_note

# the command line's --cuda is told --device cuda itself (cli.FOREIGN_FLAGS): its note would repeat it
SAID_BY_THE_FLAG = {"cuda"}


@pytest.mark.parametrize("name", sorted(FOREIGN_NOTE_TEMPLATES))
def test_the_field_and_flag_notes_are_one_template_each(name):
    template = FOREIGN_NOTE_TEMPLATES[name]
    assert FOREIGN_NOTES[name] == foreign_note(template)
    if name not in SAID_BY_THE_FLAG:
        assert cli.FOREIGN_FLAG_NOTES[name] == foreign_note(template, flags=True)
    assert "{" not in FOREIGN_NOTES[name] + cli.FOREIGN_FLAG_NOTES[name]  # every setting was written out


def test_a_setting_is_written_in_field_words_or_flag_words():
    template = "{vf_clip_coef=X} with {clip_vloss=True}; {clip_vloss=False}; {hidden_sizes=[64, 64]}; " \
               "{activation='tanh' or 'relu'}; {num_envs} x {num_steps}"
    assert foreign_note(template) == ("vf_clip_coef=X with clip_vloss=True; clip_vloss=False; hidden_sizes=[64, 64]; "
                                      "activation='tanh' or 'relu'; num_envs x num_steps")
    assert foreign_note(template, flags=True) == ("--vf-clip-coef X with --clip-vloss; --no-clip-vloss; --hidden-sizes "
                                                  "64,64; --activation tanh or relu; --num-envs x --num-steps")


def test_the_value_clip_note_reads_in_each_ones_words():
    assert did_you_mean("clip_range_vf").endswith("SB3's clip_range_vf=None is clip_vloss=False)")
    assert cli.FOREIGN_FLAG_NOTES["clip_range_vf"].startswith("--vf-clip-coef X with --clip-vloss (the default) clips")
