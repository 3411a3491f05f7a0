"""Validates custom resources against the structural schemas of their CRDs, strictly.

Usage: python check_custom_resources.py CRDS.yaml RESOURCES.yaml...

The CRD's openAPIV3Schema is turned into a JSON Schema that rejects unknown fields, as the API
server does with strict field validation (`kubectl apply --validate=strict`), and its CEL rules
(x-kubernetes-validations) are evaluated with cel-python on the fields present (transition rules,
which need `oldSelf`, cannot apply to a new object and are left out). Defaults are not applied
first, so a rule on a defaulted field only runs when the field is written out. Exit status 1 when
any resource fails or has no CRD. Run by `cargo xtask lint-deploy` with the interpreter of its
virtualenv (PyYAML and jsonschema come with kubernetes-validate; cel-python is pinned beside it).
"""

import sys

import celpy
import jsonschema
import yaml


def strict(schema):
    """An OpenAPI v3 structural schema as a JSON Schema that rejects unknown fields."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: strict(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = strict(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [strict(sub) for sub in value]
        elif key.startswith("x-kubernetes-") or key == "nullable":
            continue
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserves_unknown = schema.get("x-kubernetes-preserve-unknown-fields")
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
            and not preserves_unknown:
        out["additionalProperties"] = False
    return out


def cel_errors(schema, value, path, environment):
    """Messages of the CEL rules of `schema` and its subschemas that `value` breaks."""
    if not isinstance(schema, dict):
        return []
    errors = []
    for validation in schema.get("x-kubernetes-validations", []):
        rule = validation["rule"]
        if "oldSelf" in rule:
            continue
        message = validation.get("message", rule)
        try:
            program = environment.program(environment.compile(rule))
            result = program.evaluate({"self": celpy.json_to_cel(value)})
        except Exception as error:  # noqa: BLE001 - any failure to evaluate is reported
            errors.append(f"{path}: cannot evaluate CEL rule {rule!r}: {error}")
            continue
        if not isinstance(result, (bool, celpy.celtypes.BoolType)):
            # cel-python returns some evaluation errors as values instead of raising them.
            errors.append(f"{path}: CEL rule {rule!r} gave {result!r}, not a bool")
        elif not result:
            errors.append(f"{path}: {message} (CEL: {rule})")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, child in value.items():
            sub = properties.get(name, schema.get("additionalProperties"))
            errors += cel_errors(sub, child, f"{path}/{name}", environment)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            errors += cel_errors(schema.get("items"), item, f"{path}/{index}", environment)
    return errors


def schemas_of(path):
    """Per (apiVersion, kind): the strict JSON Schema and the original schema (for CEL)."""
    schemas = {}
    with open(path) as file:
        for crd in yaml.safe_load_all(file):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                api_version = f"{group}/{version['name']}"
                original = version["schema"]["openAPIV3Schema"]
                schemas[(api_version, kind)] = (strict(original), original)
    return schemas


def main(crds, resources):
    schemas = schemas_of(crds)
    if not schemas:
        print(f"ERROR {crds}: no CustomResourceDefinition found")
        return 1
    environment = celpy.Environment()
    failures = checked = 0
    for path in resources:
        with open(path) as file:
            documents = [doc for doc in yaml.safe_load_all(file) if doc]
        for doc in documents:
            api_version, kind = doc.get("apiVersion"), doc.get("kind")
            name = f"{kind} {doc.get('metadata', {}).get('namespace', '')}/{doc.get('metadata', {}).get('name')}"
            found = schemas.get((api_version, kind))
            checked += 1
            if found is None:
                print(f"ERROR {name}: no CRD serves {api_version} {kind}")
                failures += 1
                continue
            if not doc.get("metadata", {}).get("name"):
                print(f"ERROR {name}: metadata.name is missing")
                failures += 1
            # The API server handles apiVersion, kind and metadata itself; the schema covers the rest.
            body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
            schema, original = found
            errors = [f"/{'/'.join(map(str, e.path))}: {e.message}"
                      for e in sorted(jsonschema.Draft4Validator(schema).iter_errors(body),
                                      key=lambda e: list(map(str, e.path)))]
            # Root-level CEL rules see `self.metadata.name` and `generateName`, nothing else of
            # the metadata (as kube-apiserver exposes them).
            metadata = {k: v for k, v in doc.get("metadata", {}).items()
                        if k in ("name", "generateName")}
            errors += cel_errors(original, dict(body, metadata=metadata), "", environment)
            for error in errors:
                print(f"ERROR {name}: {error}")
            failures += bool(errors)
            if not errors:
                print(f"ok {name} ({api_version})")
    if checked == 0:
        print("ERROR no custom resource to check")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
