.PHONY: test demo models
# Run every test (installs what is missing first).
test:
	scripts/test.sh
# Start the gateway on loopback with the stub agent and place one demo call through it.
demo:
	scripts/demo.sh
models:
	scripts/fetch-models.sh
