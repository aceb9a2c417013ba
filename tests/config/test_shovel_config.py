"""[[shovel]] tables: the plugin's names and values, each bad field named with its line."""
import pytest

from rtroute.config.rtroute_toml import loads
from rtroute.config.shovel import BASIC_PROPERTIES, DECLARATION_METHODS, amqp_uri_problem

S = """\
[[shovel]]
name = "my_first_shovel"
sources = { broker = "amqp://src" }
destinations = { broker = "amqp://dst" }
"""
Q = S + 'queue = "q"\n'


def shovel(extra: str, base: str = Q):
    (loaded,) = loads(base + extra).shovels
    return loaded


BAD_SHOVELS = [
    (Q + 'ack_mode = "on_ack"  # <-\n',
     ("shovel 'my_first_shovel': ack_mode must be one of no_ack, on_publish, on_confirm, "
     "got 'on_ack'")),
    (Q + "prefetch_count = -1  # <-\n", "prefetch_count must be between 0 and 65535, got -1"),
    (Q + "prefetch_count = 70000  # <-\n", "prefetch_count must be between 0 and 65535"),
    (Q + "reconnect_delay = -0.5  # <-\n", "reconnect_delay must be >= 0, got -0.5"),
    (Q + 'reconnect_delay = "5"  # <-\n', "reconnect_delay must be a number, got a string"),
    (Q + "reconnect_delay = nan  # <-\n", "reconnect_delay must be a finite number"),
    (Q + "publish_properties = { delivery_mode = 3 }  # <-\n",
     "publish_properties.delivery_mode must be 1 (transient) or 2 (persistent), got 3"),
    (Q + "publish_properties = { priority = 256 }  # <-\n",
     "publish_properties.priority must be an integer 0-255, got 256"),
    (Q + "publish_properties = { expiration = 60000 }  # <-\n",
     "publish_properties.expiration must be a string of digits"),
    (Q + 'publish_properties = { expiration = "1m" }  # <-\n',
     "publish_properties.expiration must be a string of digits"),
    (Q + 'publish_properties = { timestamp = "now" }  # <-\n',
     "publish_properties.timestamp must be a non-negative integer"),
    (Q + "publish_properties = { content_type = 1 }  # <-\n",
     "publish_properties.content_type must be a string, got an integer"),
    (Q + 'publish_properties = { headers = "x" }  # <-\n',
     "publish_properties.headers must be a table, got a string"),
    (Q + 'publish_properties = { delivery-mode = 2 }  # <-\n',
     ("publish_properties.delivery-mode is not an AMQP basic property; use one of "
     "content_type, content_encoding, headers, delivery_mode")),
    (Q + 'publish_properties = { reply_too = "q" }  # <-\n', "(did you mean 'reply_to'?)"),
    (Q + "publish_properties = 2  # <-\n", "publish_properties must be a table, got an integer"),
    (Q + 'publish_fields = { exchang = "x" }  # <-\n',
     ("publish_fields.exchang is not a publish field; use exchange or routing_key "
     "(did you mean 'exchange'?)")),
    (Q + "publish_fields = { routing_key = 1 }  # <-\n",
     "publish_fields.routing_key must be a string, got an integer"),
    # endpoints
    ('[[shovel]]  # <-\nname = "s"\ndestinations = { broker = "amqp://" }\nqueue = "q"\n',
     "shovel 's': sources is required"),
    ('[[shovel]]\nname = "s"\nsources = { brokers = [] }  # <-\n',
     "sources.brokers must not be empty"),
    ('[[shovel]]\nname = "s"\nsources = { brokers = [\n  "amqp://a",\n  "http://b",  # <-\n] }\n',
     "sources.brokers[1] must start with amqp:// or amqps://"),
    ('[[shovel]]\nname = "s"\nsources = { brokers = ["amqp://a", 5] }  # <-\n',
     "sources.brokers[1] must be a string, got an integer"),
    ('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", brokers = ["amqp://"] }  # <-\n',
     "sources: give broker or brokers, not both"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://" }\n'
     'destinations = { declarations = [] }  # <-\n'), "destinations needs broker or brokers"),
    ('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", brokrs = [] }  # <-\n',
     "unknown key 'brokrs' in sources (did you mean 'broker"),
    ('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", protocol = "amqp10" }  # <-\n',
     "sources.protocol: only amqp091 is supported, got 'amqp10'"),
    ('[[shovel]]\nname = "s"\nsources = "amqp://"  # <-\n',
     "sources must be a table, got a string"),
    # declarations
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  "queue.declar",  # <-\n] }\n'),
     ("sources.declarations[0]: unknown method 'queue.declar'; use one of exchange.declare, "
     "exchange.delete, exchange.bind")),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { method = "queue.declar" },  # <-\n] }\n'), "(did you mean 'queue.declare'?)"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { method = "queue.declare", durabel = true },  # <-\n] }\n'),
     ("sources.declarations[0]: queue.declare has no field 'durabel'; fields are queue, "
     "passive, durable")),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { method = "queue.declare", durable = "yes" },  # <-\n] }\n'),
     "sources.declarations[0].durable must be a boolean, got a string"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  "queue.declare",\n  { method = "queue.bind", queue = "" },  # <-\n] }\n'),
     "sources.declarations[1]: queue.bind needs exchange"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { queue = "q" },  # <-\n] }\n'), "sources.declarations[0] needs a method"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { method = "queue.declare", arguments = 5 },  # <-\n] }\n'),
     "sources.declarations[0].arguments must be a table"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  { method = "queue.declare", auto_delete = true, auto-delete = true },  # <-\n] }\n'),
     "'auto_delete' and 'auto-delete' are the same field"),
    (('[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
     '  5,  # <-\n] }\n'), "sources.declarations[0] must be a method name or a table"),
    # source and destination choices
    (S + 'queue = "q"\nsrc-exchange = "x"  # <-\n', "give queue or src-exchange, not both"),
    (S.replace("[[shovel]]", "[[shovel]]  # <-") + 'ack_mode = "on_confirm"\n',
     "shovel 'my_first_shovel': needs a source: queue (src-queue) or src-exchange"),
    (S + 'src_exchange = "x"\nsrc-exchange = "x"  # <-\n',
     "'src_exchange' and 'src-exchange' are the same setting; give it once"),
    (S + 'queue = "q"\nsrc-queue = "q"  # <-\n', "'queue' and 'src-queue' are the same setting"),
    (Q + 'src-exchange-key = "k"  # <-\n', "src-exchange-key needs src-exchange"),
    (Q + "durable_queue = true  # <-\n", "durable_queue only applies with src-exchange"),
    (S + 'src-exchange = "x"\ndurable_queue = 5  # <-\n',
     "durable_queue must be true or a queue name, got 5"),
    (Q + 'dest-exchange = "x"\ndest-queue = "y"  # <-\n',
     "give dest-exchange or dest-queue, not both"),
    (Q + 'dest-queue = "y"\ndest-exchange-key = "k"  # <-\n',
     "dest-exchange-key has no effect with dest-queue"),
    (Q + 'dest-exchange = "x"\npublish_fields = { exchange = "y" }  # <-\n',
     "publish_fields.exchange conflicts with dest-exchange/dest-queue"),
    (Q + 'src-delete-after = "sometimes"  # <-\n',
     "src-delete-after must be \"never\", \"queue-length\" or a message count, got 'sometimes'"),
    (Q + 'ack_mode = "no_ack"\nsrc-delete-after = 10  # <-\n',
     "a numeric src-delete-after needs acknowledgements"),
    (Q + 'ack_mode = "on_publish"\non_unroutable = "nack"  # <-\n',
     "on_unroutable 'nack' needs ack_mode on_confirm"),
    (Q + 'on_unroutable = "dead-letter"  # <-\n',
     "on_unroutable must be one of nack, requeue, drop, got 'dead-letter'"),
    (Q + "nack_retries = -1  # <-\n", "nack_retries must be >= 0, got -1"),
    (Q + 'add-forward-headers = "true"  # <-\n',
     "add-forward-headers must be a boolean, got a string"),
    (Q + 'queue = "q"  # <-\n', "Cannot overwrite a value"),  # duplicate key: a TOML error
    (Q + 'dest-queue = "' + "q" * 300 + '"  # <-\n', "dest-queue is 300 bytes long"),
    # filter
    (Q + "filter = {}  # <-\n", "filter needs selector and/or key"),
    (Q + 'filter = { key = "a.b", kind = "fanout" }  # <-\n',
     "filter.kind must be one of topic, rtopic, got 'fanout'"),
    (Q + 'filter = { key = "a.b", on_mismatch = "keep" }  # <-\n',
     "filter.on_mismatch must be one of drop, leave, got 'keep'"),
    (Q + 'filter = { key = "a.b", keys = "c" }  # <-\n',
     "unknown key 'keys' in filter (did you mean 'key'?)"),
    (Q + 'filter = "a = 1"  # <-\n', "filter must be a table with selector and/or key"),
    # names and unknown keys
    (Q + 'ack-mod = "on_confirm"  # <-\n', "unknown key 'ack-mod' (did you mean 'ack_mode'?)"),
    (Q + 'prefetch = 10  # <-\n', "unknown key 'prefetch' (did you mean 'prefetch_count'?)"),
    ('[[shovel]]  # <-\nsources = { broker = "amqp://" }\n', "shovel: name is required"),
    ('[[shovel]]\nname = ""  # <-\n', "shovel: name must not be empty"),
    (Q + Q.replace("[[shovel]]\n", "[[shovel]]\n").replace(
        'name = "my_first_shovel"', 'name = "my_first_shovel"  # <-'),
     "shovel 'my_first_shovel': name used twice (first defined on line 2)"),
]


@pytest.mark.parametrize("text,message", BAD_SHOVELS)
def test_bad_shovel_field_names_shovel_field_and_line(text, message, error_at_marker):
    error_at_marker(text, message)


def test_dashed_and_underscored_keys_are_the_same():
    dashed = shovel('ack-mode = "on-publish"\nprefetch-count = 5\nreconnect-delay = 0.25\n')
    underscored = shovel('ack_mode = "on_publish"\nprefetch_count = 5\nreconnect_delay = 0.25\n')
    assert dashed == underscored
    assert dashed.ack_mode == "on_publish" and dashed.reconnect_delay == 0.25


def test_dynamic_plugin_aliases_are_accepted():
    loaded = shovel(
        'src-queue = "q"\nsrc-prefetch-count = 7\ndelete-after = 100\n'
        'dest-add-forward-headers = true\nadd-timestamp-header = true\n'
        'dest-publish-properties = { app_id = "rt" }\n',
        base=S,
    )
    assert loaded.queue == "q" and loaded.prefetch_count == 7
    assert loaded.src_delete_after == 100
    assert loaded.add_forward_headers and loaded.dest_add_timestamp_header
    assert loaded.publish_properties == {"app_id": "rt"}


def test_every_basic_property_is_accepted():
    props = {
        "content_type": '"application/json"', "content_encoding": '"gzip"',
        "headers": "{ a = 1 }", "delivery_mode": "2", "priority": "0",
        "correlation_id": '"c"', "reply_to": '"r"', "expiration": '"60000"',
        "message_id": '"m"', "timestamp": "1700000000", "type": '"t"', "user_id": '"guest"',
        "app_id": '"a"', "cluster_id": '"x"',
    }
    assert sorted(props) == sorted(BASIC_PROPERTIES)
    table = ", ".join(f"{k} = {v}" for k, v in props.items())
    loaded = shovel(f"publish_properties = {{ {table} }}\n")
    assert loaded.publish_properties["headers"] == {"a": 1}
    assert loaded.publish_properties["timestamp"] == 1700000000
    assert set(loaded.publish_properties) == set(BASIC_PROPERTIES)


def test_declarations_are_normalized_with_every_field():
    loaded = shovel(
        "",
        base='[[shovel]]\nname = "s"\nsources = { broker = "amqp://", declarations = [\n'
        '  "queue.declare",\n'
        '  { method = "queue.bind", exchange = "x", routing-key = "k", ticket = 0 },\n'
        '  { method = "exchange.bind", source = "a", destination = "b" },\n'
        '] }\ndestinations = { broker = "amqp://" }\nqueue = ""\n',
    )
    declare, bind, xbind = loaded.sources.declarations
    assert declare == {"method": "queue.declare", "queue": "", "passive": False,
                       "durable": False, "exclusive": False, "auto_delete": False,
                       "arguments": {}, "if_missing": False}
    assert bind == {"method": "queue.bind", "queue": "", "exchange": "x", "routing_key": "k",
                    "arguments": {}}
    assert xbind == {"method": "exchange.bind", "source": "a", "destination": "b",
                     "routing_key": "", "arguments": {}}
    assert loaded.queue == ""


@pytest.mark.parametrize("method", sorted(DECLARATION_METHODS))
def test_every_declaration_method_fills_its_defaults(method):
    required = {
        "exchange.declare": 'exchange = "x"', "exchange.delete": 'exchange = "x"',
        "exchange.bind": 'source = "a", destination = "b"',
        "exchange.unbind": 'source = "a", destination = "b"',
        "queue.bind": 'exchange = "x"', "queue.unbind": 'exchange = "x"',
    }.get(method, "")
    args = f", {required}" if required else ""
    loaded = shovel(
        "",
        base=f'[[shovel]]\nname = "s"\nsources = {{ broker = "amqp://", declarations = [\n'
        f'  {{ method = "{method}"{args} }},\n] }}\ndestinations = {{ broker = "amqp://" }}\n'
        'queue = "q"\n',
    )
    (declaration,) = loaded.sources.declarations
    assert set(declaration) == {"method", *DECLARATION_METHODS[method]}


def test_on_unroutable_defaults_to_drop_without_confirms():
    assert shovel('ack_mode = "no_ack"\n').on_unroutable == "drop"
    assert shovel('ack_mode = "on_confirm"\n').on_unroutable == "nack"
    assert shovel('on_unroutable = "requeue"\n').on_unroutable == "requeue"


def test_src_exchange_mode_with_and_without_durable_queue():
    private = shovel('src-exchange = "x"\n', base=S)
    assert (private.queue, private.src_exchange, private.src_exchange_key) == (None, "x", "")
    assert private.durable_queue is None
    named = shovel('src-exchange = "x"\nsrc-exchange-key = "k"\ndurable_queue = "keep"\n', base=S)
    assert (named.src_exchange_key, named.durable_queue) == ("k", "keep")
    assert shovel('src-exchange = "x"\ndurable_queue = false\n', base=S).durable_queue is None


def test_uris_is_an_alias_of_brokers():
    loaded = loads('[[shovel]]\nname = "s"\nsources = { uris = ["amqp://a"] }\n'
                   'destinations = { broker = "amqp://" }\nqueue = "q"\n').shovels[0]
    assert loaded.sources.brokers == ["amqp://a"]


@pytest.mark.parametrize(
    "uri,problem",
    [
        ("amqp://", None),
        ("amqps://user:pw@host:5671/vhost?heartbeat=5&cacertfile=/x.pem", None),
        ("amqp://h/%2F", None),
        ("amqp:host", "must start with amqp://"),
        ("http://h", "must start with amqp:// or amqps://"),
        ("amqp://h:port/", "is not a valid URI"),
        ("amqp://h:0/", "has port 0"),
        ("amqp://h/v#frag", "must not have a #fragment"),
    ],
)
def test_amqp_uri_checks(uri, problem):
    found = amqp_uri_problem(uri)
    assert (found is None) if problem is None else (problem in found)
