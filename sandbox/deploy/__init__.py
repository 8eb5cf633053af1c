"""How the service is started and shipped: the `alprl-sandbox` command (`cli`: serve, gateway), a server
subprocess for tests, demos and benches (`local_server`), the image (`Dockerfile`, `build_image.sh`), the compose
stack's port publisher (`gateway`) and its flags for `docker run` (`compose_flags`), and the script that starts a
Docker engine for the Docker tests (`docker_engine.sh`)."""
