"""Which broker tests run against every broker claimed (3.10.8, 4.0.5, 4.3.6), not only the newest.

``scripts/test.sh`` runs the whole broker tier (``pytest -m broker``) against RabbitMQ 4.3, the
newest broker claimed and the one where the x-rtopic plugin cannot start, and only the tests
marked ``every_broker`` (``pytest -m "broker and every_broker"``) against 4.0 and 3.10: the
suite stays under 30 minutes with three brokers instead of running the broker tier three
times. A test is marked when it is one of:

- **loss**: it proves that nothing confirmed is lost or duplicated beyond the documented
  bound (kill -9, refusals, dead letters, frame limits): broker versions differ exactly in
  those paths (quorum delivery counts, queue types, confirms, the BCC exchange's type);
- **security**: hostile clients, interception, TLS, credentials, another broker's API;
- **version**: its rule differs per version (a test using the ``broker_version`` fixture is
  marked without being listed), or it compares with the broker's or the plugin's own
  behaviour, which changes between versions (binding events, management API fields,
  declarations, error texts, the plugin's and the shovel plugin's formats);
- **smoke**: one end-to-end path of each component (sidecar, proxy, publisher, shovel,
  divert, Spark drain), so that nothing is wholly unexercised on an older broker.

What stays on 4.3 only is version-independent logic run through a broker (the sidecar's,
the shovel's and the publisher's own logic, which the unit leg runs on the stub broker of
tests/stub_rabbit.py; option parsing and config translation seen through a running process,
HTTP APIs, transformers, filters, extra nodes of the tests' own, which run the host's 3.10
packages whatever the broker under test). Entries are test files, or ``file::test`` for one
test of a file (its parameters included); an entry that matches no collected test fails the
run, so a renamed test cannot silently leave the list.
"""
from __future__ import annotations

import pytest

EVERY_BROKER: dict[str, str] = {
    # -- loss --------------------------------------------------------------------------------
    "tests/proxy/test_loss_and_interception.py": "loss, security",
    "tests/proxy/test_own_user.py": "security: the proxy's own user needs exactly what docs/proxy.md gives",
    "tests/proxy/test_proxy_failure.py": "loss: kill -9 of the proxy; another broker's management API",
    "tests/proxy/test_two_proxies.py": "loss: bind-ok through one proxy, a publish through another",
    "tests/proxy/test_event_gap.py": "loss: a publish while the event subscription is lost",
    "tests/proxy/test_other_vhost.py": "loss, version: the event plugin's vhost and headers",
    "tests/sidecar/test_quorum_ingress.py": "loss: quorum delivery limit (4.3 counts rejects only)",
    "tests/sidecar/test_unroutable.py::test_a_bcc_only_publish_is_counted_by_the_empty_table_it_leaves":
        "version: RabbitMQ strips BCC before the ingress queue",
    "tests/sidecar/test_large_match_set_delivery.py": "loss: match sets beyond one frame",
    "tests/sidecar/test_connection_blocked.py": "loss: connection.blocked holds republishes",
    "tests/publisher/test_publisher_blocked.py": "loss: connection.blocked holds publishes",
    "tests/sidecar/test_sidecar_broker.py::test_kill_9_mid_stream_loses_nothing": "loss",
    "tests/sidecar/test_sidecar_broker.py::test_malformed_messages_are_dead_lettered_and_the_sidecar_goes_on":
        "loss: dead letters",
    "tests/sidecar/test_sidecar_broker.py::test_unroutable_goes_to_the_alternate_exchange":
        "loss",
    "tests/sidecar/test_sidecar_broker.py::test_hostile_pattern_against_20k_bindings_is_routed_once_per_queue":
        "loss: BCC through NAME.bindings, a topic exchange on 3.x and a direct one on 4.x",
    "tests/sidecar/test_sidecar_broker.py::test_bodies_of_every_size_cross_intact_once_per_queue":
        "loss: frame sizes",
    "tests/publisher/test_publisher_cover_broker.py": "loss: match sets beyond one frame",
    "tests/shovel/test_nothing_vanishes.py": "loss",
    "tests/shovel/test_lossless_headers.py": "loss",
    "tests/shovel/test_process.py::test_kill_9_while_20000_persistent_messages_move_loses_nothing":
        "loss",
    "tests/divert/test_lossless_broker.py": "loss",
    "tests/divert/test_oversized.py": "loss: frame sizes",
    "tests/divert/test_divert_broker.py::test_kill_9_mid_stream_loses_neither_originals_nor_copies":
        "loss",
    "tests/spark/test_drain_lossless.py": "loss",
    "tests/amqp/test_confirm_window.py": "loss: confirms",
    "tests/amqp/test_connection.py": "loss: in-flight publishes on a closed connection",
    "tests/sidecar/test_node_restart.py": "loss: a node restart (Mnesia on 3.10 and 4.0, "
                                          "Khepri on 4.3)",
    "tests/proxy/test_proxy_node_restart.py": "loss: a node restart",
    # -- security ----------------------------------------------------------------------------
    "tests/proxy/test_hostile_clients.py": "security (the pre-auth frame limit differs: 4096 "
                                           "on 3.10, 8192 from 4.1)",
    "tests/proxy/test_under_attack.py": "security",
    "tests/proxy/test_tls.py": "security",
    "tests/proxy/test_upstream_tls.py": "security",
    "tests/sidecar/test_header_fidelity.py": "security: BCC never reaches a consumer",
    "tests/sidecar/test_sidecar_broker.py::test_delivery_keeps_body_properties_and_routing_key_and_hides_bcc":
        "security: BCC hidden",
    "tests/sidecar/test_management_identity.py": "security: another broker's management API",
    "tests/amqp/test_broker_identity.py": "security: another broker's management API",
    "tests/shovel/test_plugin_fixes.py::test_passwords_never_reach_logs_status_metrics_or_headers":
        "security",
    # -- version -----------------------------------------------------------------------------
    "tests/proxy/test_plugin_parity.py": "version: the plugin's behaviour per version",
    "tests/proxy/test_permission_parity.py": "security, version: the plugin's permissions "
                                             "and the broker's refusal texts per version",
    "tests/proxy/test_plugin_behaviour.py": "version",
    "tests/proxy/test_inequivalent_declare.py": "version: the broker's error texts",
    "tests/amqp/test_binding_watcher.py": "version: binding events (Khepri on 4.3)",
    "tests/amqp/test_management.py": "version: management API fields",
    "tests/amqp/test_declarations.py": "version: declarations",
    "tests/shovel/test_drop_in.py": "version: the shovel plugin's definitions",
    "tests/shovel/test_rabbitmq_4_3.py": "version: the 4.3 shovel plugin's keys and columns",
    "tests/sidecar/test_sharded_ingress.py": "version: the consistent hash exchange",
    "tests/routing/test_rabbitmq_parity.py": "version: the broker's own topic routing",
    "tests/test_broker_under_test.py": "version: the broker under test is the one named",
    # -- what names the local broker (127.0.0.1:5672) as shipped: it runs in the 3.10 leg --
    "tests/test_examples.py": "smoke: the examples as shipped (skipped on other brokers)",
    "tests/test_snippets.py": "smoke: the docs' snippets as written (skipped on other brokers)",
    "tests/test_shell_snippets.py": "smoke: the docs' shell snippets, each on the leg of the broker "
                                    "it names",
    # -- smoke: one end-to-end path per component --------------------------------------------
    "tests/sidecar/test_sidecar_broker.py::test_plugin_readme_scenario_queue_by_queue": "smoke",
    "tests/publisher/test_publisher_broker.py::test_the_plugins_readme_table_through_the_library":
        "smoke, version: the plugin's table on NAME.bindings",
    "tests/publisher/test_publisher_broker.py::test_cc_kept_real_bcc_routed_and_stripped":
        "security: BCC stripped by the broker",
    "tests/publisher/test_publisher_broker.py::test_matched_key_delivery_reaches_the_plugins_queues_with_the_key_in_a_header":
        "version",
    "tests/publisher/test_publisher_broker.py::test_a_full_queue_that_rejects_publishes_nacks_those_messages_only":
        "loss: refusals",
    "tests/publisher/test_publisher_broker.py::test_unroutable_reaches_the_alternate_exchange_of_name_bindings":
        "loss: unroutable",
    "tests/publisher/test_publisher_broker.py::test_a_match_set_larger_than_one_header_frame_gives_each_queue_one_copy":
        "loss: frame sizes",
    "tests/publisher/test_publisher_broker.py::test_bindings_made_and_removed_while_running_are_followed":
        "version: binding events",
    "tests/publisher/test_publisher_broker.py::test_connection_closed_by_the_broker_reconnects_and_no_message_is_stuck":
        "loss",
    "tests/publisher/test_publisher_broker.py::test_a_missing_bindings_exchange_is_a_clear_error_at_once":
        "version: the broker's refusal",
    "tests/publisher/test_publisher_broker.py::test_bodies_of_every_size_arrive_intact":
        "loss: frame sizes",
    "tests/publisher/test_publisher_broker.py::test_headers_larger_than_a_frame_fail_that_message_only":
        "loss: frame sizes",
    "tests/publisher/test_publisher_broker.py::test_a_direct_bindings_exchange_as_rabbitmq_4_layouts_have_it":
        "version",
    "tests/shovel/test_moving.py::test_each_ack_mode_moves_every_message_in_order": "smoke",
    "tests/divert/test_divert_broker.py::test_artemis_price_example_exclusive_with_filter":
        "smoke",
    "tests/spark/test_drain.py::test_drain_writes_every_message_once_and_empties_the_queue":
        "smoke",
}


def _entry_of(item: pytest.Item) -> tuple[str, str]:
    path = item.nodeid.split("::", 1)[0]
    test = item.nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in item.nodeid else ""
    return path, f"{path}::{test}"


def mark(items: list[pytest.Item], config: pytest.Config) -> None:
    """Mark ``every_broker`` the broker tests listed above and those using ``broker_version``;
    fail when a listed entry matches no collected test of a file that was collected."""
    matched: set[str] = set()
    collected_files: set[str] = set()
    for item in items:
        path, test = _entry_of(item)
        collected_files.add(path)
        entry = test if test in EVERY_BROKER else path if path in EVERY_BROKER else None
        if entry is not None:
            matched.add(entry)
        if entry is not None or "broker_version" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.every_broker)
    # only entries whose file was collected can be checked (a run of one file or one test)
    stale = [entry for entry in EVERY_BROKER
             if entry.split("::", 1)[0] in collected_files and entry not in matched
             and not config.getoption("keyword") and not config.getoption("deselect")
             and "::" not in " ".join(config.args)]
    if stale:
        raise pytest.UsageError("tests/every_broker.py lists tests that do not exist: "
                                + ", ".join(sorted(stale)))
