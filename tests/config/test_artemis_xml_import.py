"""`rtroute divert import broker.xml`: the <diverts> of an ActiveMQ Artemis broker.xml become
[[divert]] tables that `rtroute config check` accepts; Java transformers and unknown elements
are said, and a document with a DTD is refused before anything in it expands."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rtroute.config.rtroute_toml import DivertConfig, loads
from rtroute.divert.artemis_xml import ArtemisXmlError, import_diverts
from rtroute.divert.commands import divert as divert_group

# the shape of Artemis's examples/features/standard/divert broker.xml (server0)
EXAMPLE = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!-- the divert example -->
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
               xsi:schemaLocation="urn:activemq /schema/artemis-configuration.xsd">
   <core xmlns="urn:activemq:core">
      <journal-directory>./data/journal</journal-directory>
      <diverts>
         <divert name="order-divert">
            <routing-name>order-divert</routing-name>
            <address>orders</address>
            <forwarding-address>spyTopic</forwarding-address>
            <exclusive>false</exclusive>
         </divert>

         <divert name="prices-divert">
            <routing-name>prices-divert</routing-name>
            <address>priceUpdates</address>
            <forwarding-address>priceForwarding</forwarding-address>
            <filter string="office='New York'"/>
            <transformer>
               <class-name>org.apache.activemq.artemis.jms.example.AddForwardingTimeTransformer</class-name>
            </transformer>
            <exclusive>true</exclusive>
         </divert>
      </diverts>
      <addresses>
         <address name="priceForwarding"><anycast><queue name="priceForwarding"/></anycast></address>
         <address name="orders"><anycast><queue name="orders"/></anycast></address>
         <address name="spyTopic"><multicast/></address>
         <address name="priceUpdates"><multicast/></address>
      </addresses>
   </core>
</configuration>
"""

# the user manual's exclusive divert, with transformer-class-name, and a routing type
MANUAL = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><diverts>
<divert name="prices-divert">
   <address>priceUpdates</address>
   <forwarding-address>priceForwarding</forwarding-address>
   <filter string="office='New York'"/>
   <transformer-class-name>
      org.apache.activemq.artemis.jms.example.AddForwardingTimeTransformer
   </transformer-class-name>
   <exclusive>true</exclusive>
   <routing-type>ANYCAST</routing-type>
</divert>
</diverts></core></configuration>
"""


def test_artemis_divert_example_becomes_diverts_that_config_check_accepts():
    result = import_diverts(EXAMPLE, "broker.xml")
    config = loads(result.toml, "imported.toml")
    assert [(e.name, e.kind) for e in config.exchanges] == [("orders", "topic"),
                                                             ("priceUpdates", "topic")]
    assert config.diverts == [
        DivertConfig(name="order-divert", address="orders", forwarding_address="spyTopic",
                     exclusive=False, routing_name="order-divert"),
        DivertConfig(name="prices-divert", address="priceUpdates",
                     forwarding_address="priceForwarding", filter="office='New York'",
                     exclusive=True, routing_name="prices-divert"),
    ]
    assert result.diverts == ["order-divert", "prices-divert"]


def test_a_java_transformer_is_left_out_with_a_comment_and_a_warning():
    result = import_diverts(MANUAL, "broker.xml")
    (divert,) = loads(result.toml).diverts
    assert divert.transformer is None and divert.routing_type == "ANYCAST"
    comment = next(line for line in result.toml.splitlines() if "transformer" in line)
    assert comment.startswith("# transformer org.apache.activemq.artemis.jms.example."
                              "AddForwardingTimeTransformer is a Java class and is not "
                              "carried over")
    assert result.warnings == [f"divert 'prices-divert': {comment[2:]}"]
    assert "# divert 'prices-divert' from broker.xml:2" in result.toml


def test_unknown_elements_are_named_in_a_warning():
    text = MANUAL.replace("<exclusive>", "<colour>blue</colour><exclusive>")
    result = import_diverts(text, "broker.xml")
    assert "divert 'prices-divert': <colour> is not a divert setting rtroute knows: left out" \
        in result.warnings
    assert loads(result.toml).diverts[0].exclusive is True


def test_a_wildcard_address_stays_a_pattern_over_the_addresses_it_matches():
    text = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
    <diverts><divert name="eu"><address>orders.eu.#</address>
    <forwarding-address>audit</forwarding-address></divert></diverts>
    <addresses><address name="orders.eu.fr"/><address name="orders.eu.de"/>
    <address name="orders.us"/></addresses></core></configuration>"""
    result = import_diverts(text, "broker.xml")
    config = loads(result.toml)
    assert [e.name for e in config.exchanges] == ["orders.eu.fr", "orders.eu.de"]
    assert config.diverts[0].address == "orders.eu.#"


def test_a_wildcard_address_that_matches_no_address_is_said():
    text = MANUAL.replace("<address>priceUpdates</address>", "<address>prices.*</address>")
    result = import_diverts(text, "broker.xml")
    assert any("address 'prices.*' is a wildcard and no <address> of the file matches it"
               in w for w in result.warnings)


def test_a_filter_rtroute_cannot_run_leaves_the_divert_commented_out():
    text = MANUAL.replace("office='New York'", "office = ")
    result = import_diverts(text, "broker.xml")
    assert loads(result.toml).diverts == []
    assert "#[[divert]]" in result.toml.replace("# [[divert]]", "#[[divert]]")
    assert any("is not a selector rtroute runs" in w for w in result.warnings)


@pytest.mark.parametrize("hostile", [
    # billion laughs: the entities must never expand
    ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
     '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
     '<configuration><core><diverts><divert name="&lol2;"/></diverts></core></configuration>'),
    # an external entity: nothing is read or fetched
    ('<?xml version="1.0"?><!DOCTYPE c [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
     '<configuration><core><diverts><divert name="d"><address>&x;</address>'
     '</divert></diverts></core></configuration>'),
    '<!DOCTYPE configuration SYSTEM "http://example.invalid/artemis.dtd"><configuration/>',
], ids=["billion-laughs", "external-entity", "external-dtd"])
def test_a_document_with_a_dtd_is_refused(hostile):
    with pytest.raises(ArtemisXmlError, match=r"broker.xml:1: the document has a DTD"):
        import_diverts(hostile.encode(), "broker.xml")


def test_malformed_xml_and_a_divert_without_an_address_are_one_line_errors():
    with pytest.raises(ArtemisXmlError, match=r"^broker.xml:2: not well-formed XML"):
        import_diverts("<configuration>\n<core></configuration>", "broker.xml")
    with pytest.raises(ArtemisXmlError, match="divert 'd' has no <address>"):
        import_diverts('<configuration><diverts><divert name="d"><forwarding-address>x'
                       '</forwarding-address></divert></diverts></configuration>', "broker.xml")


def test_import_command_writes_a_file_that_config_check_accepts(tmp_path):
    from rtroute.cli import main

    xml = tmp_path / "broker.xml"
    xml.write_text(EXAMPLE)
    out = tmp_path / "rtroute.toml"
    runner = CliRunner()
    result = runner.invoke(divert_group, ["import", str(xml), "--vhost", "prod", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "AddForwardingTimeTransformer is a Java class" in result.output  # the warning
    assert 'uri = "amqp://guest:guest@127.0.0.1:5672/prod"' in out.read_text()
    check = runner.invoke(main, ["config", "check", str(out)])
    assert check.exit_code == 0, check.output
    assert "2 exchanges, 2 diverts" in check.output
    printed = runner.invoke(divert_group, ["import", str(xml)])
    assert printed.exit_code == 0 and "[[divert]]" in printed.stdout


def test_import_command_refuses_a_dtd_in_one_line(tmp_path):
    xml = tmp_path / "broker.xml"
    xml.write_text('<!DOCTYPE c [<!ENTITY x "y">]><configuration/>')
    result = CliRunner().invoke(divert_group, ["import", str(xml)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {xml}:1: the document has a DTD")
