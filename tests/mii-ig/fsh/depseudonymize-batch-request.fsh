Instance: de-pseudonymize-example-bundle-batch-request
InstanceOf: Bundle
Description: "An example batch bundle to depseudonymize multiple pseudonyms in a single psn domain using opdef $de-pseudonymize"
Usage: #example
* meta.profile = "https://fhir.example.com/StructureDefinition/de-pseudonymize-batch-request"
* type = #batch
* entry[0].fullUrl = "urn:uuid:79378cb8-8f58-3333-a5e8-60ac2755b674"
* entry[=].resource = 79378cb8-8f58-3333-a5e8-60ac2755b674
* entry[=].request.method = #POST
* entry[=].request.url = "$de-pseudonymize"
* entry[+].fullUrl = "urn:uuid:628ddc36-c8e4-3333-bac7-2599677a9e7d"
* entry[=].resource = 628ddc36-c8e4-3333-bac7-2599677a9e7d
* entry[=].request.method = #POST
* entry[=].request.url = "$de-pseudonymize"
* entry[+].fullUrl = "urn:uuid:46fd24a0-04d4-3333-82ee-8a9cad2b6a86"
* entry[=].resource = 46fd24a0-04d4-3333-82ee-8a9cad2b6a86
* entry[=].request.method = #POST
* entry[=].request.url = "$de-pseudonymize"

Instance: 79378cb8-8f58-3333-a5e8-60ac2755b674
InstanceOf: Parameters
Usage: #inline
* parameter[+].name = "context"
* parameter[=].valueIdentifier.system = "https://sample/psn-system"
* parameter[=].valueIdentifier.value = "Transfer1"
* parameter[+].name = "pseudonym"
* parameter[=].valueIdentifier.system = "https://example.com/pseudonym-ids"
* parameter[=].valueIdentifier.value = "H3RAU56A8E"

Instance: 628ddc36-c8e4-3333-bac7-2599677a9e7d
InstanceOf: Parameters
Usage: #inline
* parameter[+].name = "context"
* parameter[=].valueIdentifier.system = "https://sample/psn-system"
* parameter[=].valueIdentifier.value = "Transfer1"
* parameter[+].name = "pseudonym"
* parameter[=].valueIdentifier.system = "https://example.com/pseudonym-ids"
* parameter[=].valueIdentifier.value = "unknown-pseudonym"

Instance: 46fd24a0-04d4-3333-82ee-8a9cad2b6a86
InstanceOf: Parameters
Usage: #inline
* parameter[+].name = "context"
* parameter[=].valueIdentifier.system = "https://sample/psn-system"
* parameter[=].valueIdentifier.value = "unknown-domain"
* parameter[+].name = "pseudonym"
* parameter[=].valueIdentifier.system = "https://example.com/pseudonym-ids"
* parameter[=].valueIdentifier.value = "H3RAU56A8E"
