// Validate rendered PodMonitor/ServiceMonitor manifests against the Prometheus Operator CRD
// schemas shipped by @kubernetes-models/prometheus-operator (types, enums and patterns of every
// field; the CRD schemas do not reject unknown fields). usage: node validate_monitors.mjs FILE...
import fs from "fs";
import yaml from "js-yaml";
import { PodMonitor, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const kinds = { PodMonitor, ServiceMonitor };
let failed = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, "utf8"))) {
    if (!doc) continue;
    const Kind = kinds[doc.kind];
    if (!Kind || doc.apiVersion !== "monitoring.coreos.com/v1") {
      console.log(`FAIL ${file}: unexpected ${doc.apiVersion} ${doc.kind}`);
      failed++;
      continue;
    }
    try {
      new Kind(doc).validate();
      console.log(`INFO ${file} passed for ${doc.kind}/${doc.metadata.name} (prometheus-operator CRD schema)`);
    } catch (e) {
      console.log(`FAIL ${file}: ${doc.kind}/${doc.metadata?.name}: ${e.message}`);
      failed++;
    }
  }
}
process.exit(failed ? 1 : 0);
