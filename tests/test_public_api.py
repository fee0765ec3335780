"""Standing tests: the public surface and the errors."""

from __future__ import annotations

import inspect
import pickle

import pytest

import actors
import actors.errors
import runtime
import runtime.errors

RUNTIME_CONTRACT = {"BatchSettings", "Bus", "BusServer", "DeadLetter", "DeadLetterQueue", "Delivery",
                    "FlowControl", "Message", "Nack", "Outcome", "PublishReport", "Publisher",
                    "PullSubscription", "RemoteBus", "Subscription", "Topic", "TopicSettings",
                    "TopicStats", "connect", "errors"}
ACTORS_CONTRACT = {"Actor", "ActorStatus", "ActorSystem", "Backoff", "ChildSpec", "DeadLetter",
                   "Event", "Pool", "Ref", "SupervisorSpec", "errors"}


@pytest.mark.parametrize("module", [actors, actors.errors, runtime, runtime.errors])
def test_all_is_sorted_and_complete(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]

    assert list(names) == sorted(names)
    assert all(hasattr(module, name) for name in names)


def test_actors_exports_the_contract() -> None:
    assert set(actors.__all__) >= ACTORS_CONTRACT


def test_runtime_exports_the_contract() -> None:
    assert set(runtime.__all__) >= RUNTIME_CONTRACT


def test_runtime_spark_exports_the_contract_without_being_imported_by_runtime() -> None:
    import subprocess
    import sys

    code = ("import sys, runtime; before = 'pyspark' in sys.modules or 'runtime.spark' in sys.modules; "
            "import runtime.spark as s; print(before, sorted(s.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "False ['SparkHandlerPool', 'register']"


def _error_classes(module: object) -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__]  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", _error_classes(actors.errors) + _error_classes(runtime.errors),
                         ids=lambda cls: cls.__name__)
def test_every_error_round_trips_through_pickle(cls: type[BaseException]) -> None:
    error = cls()

    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.args == error.args
    if hasattr(error, "code"):
        assert copy.code == error.code  # type: ignore[attr-defined]


@pytest.mark.parametrize(("cls", "builtin"), [
    (actors.errors.AskTimeoutError, TimeoutError),
    (actors.errors.ActorNotFoundError, LookupError),
    (actors.errors.NameTakenError, ValueError),
    (actors.errors.MessageNotSerializableError, TypeError),
    (runtime.errors.TopicNotFoundError, LookupError),
    (runtime.errors.TopicExistsError, ValueError),
    (runtime.errors.InvalidSettingsError, ValueError),
    (runtime.errors.UnsupportedPolicyError, ValueError),
    (runtime.errors.TopicClosedError, RuntimeError),
    (runtime.errors.MessageTypeError, TypeError),
    (runtime.errors.SettlementError, RuntimeError),
    (runtime.errors.BackendUnavailableError, ConnectionError),
])
def test_errors_also_inherit_the_closest_builtin(cls: type, builtin: type) -> None:
    assert issubclass(cls, builtin)


def test_publish_error_codes_and_texts() -> None:
    paused = runtime.errors.OrderingKeyPausedError("user-1")
    flow = runtime.errors.FlowControlError("Flow control: max outstanding bytes exceeded")

    assert (paused.code, str(paused)) == (9, "Publishing paused for ordering key: user-1")
    assert (flow.code, str(flow)) == (8, "Flow control: max outstanding bytes exceeded")
    assert runtime.errors.FlowControlError().code == 8
    assert isinstance(paused, runtime.errors.PublishError)


def test_import_actors_does_not_import_runtime() -> None:
    import subprocess
    import sys

    code = "import sys, actors; print('runtime' in sys.modules, 'pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.split() == ["False", "False"]
