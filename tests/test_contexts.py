"""``AppContext`` is frozen: a test (or the app) cannot swap a collaborator on a context in use. A changed context is
built with ``tests.contexts.context_with``: its derived parts (the cached counts) are over the new collaborators, and
it is installed for the registered functions in place of the installed context it came from."""

from __future__ import annotations

import dataclasses

import pytest

from dependencies import AppContext, get_context, installed_context
from domain.states import ProcessState
from settings import Settings
from tests.contexts import context_with, while_using
from tests.fakes import RecordingSender, StateStoreCountingScans

pytestmark = pytest.mark.cosmos


def test_a_collaborator_of_a_built_context_cannot_be_assigned(app_context: AppContext) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        app_context.sender = RecordingSender()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        app_context.settings = Settings.from_env({}, MAX_FAILURES="1")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        app_context.counts = app_context.counts  # type: ignore[misc]


def test_context_with_counts_over_the_new_states_store_and_installs_it(app_context: AppContext) -> None:
    counting = StateStoreCountingScans(app_context.states)

    ctx = context_with(app_context, states=counting, settings=Settings.from_env({}, MAX_PENDING="1"))

    assert ctx.states is counting and ctx.settings.max_pending == 1
    assert ctx.counts is not app_context.counts
    assert ctx.counts.get(ProcessState.PENDING) == 0
    assert counting.counted == [ProcessState.PENDING]  # the cap's count went through the new store
    assert app_context.states is not counting  # the context it came from is unchanged
    assert installed_context() is ctx and get_context() is ctx  # what the registered functions read


def test_context_with_on_a_context_that_is_not_installed_installs_nothing(app_context: AppContext) -> None:
    elsewhere = dataclasses.replace(app_context)  # built by a test and passed explicitly (make_ctx)

    changed = context_with(elsewhere, sender=RecordingSender())

    assert changed.sender is not app_context.sender
    assert installed_context() is app_context


def test_while_using_installs_the_changed_context_for_the_block_only(app_context: AppContext) -> None:
    with while_using(app_context, sender=RecordingSender()) as changed:
        assert installed_context() is changed
    assert installed_context() is app_context
