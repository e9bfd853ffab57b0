// Package deploy holds no code: its tests check the deployment files at the
// top of the repository (Dockerfile, docker-compose.yml) against what CI
// builds and tests, since no Docker engine runs in CI. They check the text of
// those files, not a built image.
package deploy
